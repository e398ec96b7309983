package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// Tenant labels of the isolation scenario.
const (
	TenantA = "A"
	TenantB = "B"
)

// isolationPromptTenant gives tenant A a system prompt of its own, apart
// from the agentic tenants' (B's loops use agentic tenant 0's).
const isolationPromptTenant = 1000

// IsolationReport is the isolation scenario's verdict: tenant A's
// interactive latency without and with tenant B's burst, and what the
// gateway shed. A's figures cover the same window in both runs: from the
// burst's start to the end.
type IsolationReport struct {
	WindowStartSeconds float64 `json:"window_start_seconds"`
	// BLoops is how many agent loops B kept in flight during the burst.
	BLoops int `json:"b_loops"`
	// BaselineA and BurstA are A's requests in the window of each run;
	// BurstB is B's requests.
	BaselineA Summary `json:"baseline_a"`
	BurstA    Summary `json:"burst_a"`
	BurstB    Summary `json:"burst_b"`
	// P99TTFT of A in the window, and burst/baseline (0 when undefined).
	BaselineAP99TTFTMs float64 `json:"baseline_a_p99_ttft_ms"`
	BurstAP99TTFTMs    float64 `json:"burst_a_p99_ttft_ms"`
	P99TTFTRatio       float64 `json:"p99_ttft_ratio"`
	// Sheds counts the burst run's shed requests by band, then reason.
	Sheds map[string]map[string]int `json:"sheds,omitempty"`
	// BMeanInFlight is how many of B's requests were in flight on average
	// in the window (the sum of their durations over the window), and
	// BurstMultipleAchieved is that over FleetSlots: the burst the run
	// really offered, to set against the configured BurstMultiple.
	BMeanInFlight         float64 `json:"b_mean_in_flight"`
	BurstMultipleAchieved float64 `json:"burst_multiple_achieved"`
	// BaselineFleet and BurstFleet are the engines' own occupancy in the
	// window of each run, sampled from their /metrics; nil without
	// Target.EngineMetricsURLs. Engines that queue (MaxWaiting > 0) or run
	// near their KV capacity were past their capacity; engines that never
	// queue were not, whatever the burst multiple says.
	BaselineFleet *FleetLoad `json:"baseline_fleet,omitempty"`
	BurstFleet    *FleetLoad `json:"burst_fleet,omitempty"`
	// Baseline is the whole baseline run.
	Baseline *Result `json:"baseline"`
}

// runIsolation runs the scenario twice, without and with B's burst, and
// returns the burst run with the report attached.
func runIsolation(ctx context.Context, cfg Config, target Target, label string) (*Result, error) {
	ic := cfg.Isolation
	dur := ic.Duration.D()
	burstAt, loops := ic.burstAt(), ic.loops()
	phase := cfg
	phase.MaxDuration = ic.Duration
	// The baseline has neither burst nor batch; the burst run's batch is
	// submitted as the burst starts, not by measure.
	phase.BatchLoad.Lines = 0
	var batch func(time.Time) *BatchLoadReport
	var burstEnded time.Time
	var baseErr, burstErr error
	var batchApart chan *BatchLoadReport // the batch's report, from its process
	var submitted time.Time
	keyA, keyB := orKey(ic.KeyA, target.APIKey), orKey(ic.KeyB, target.APIKey)
	nA := int(math.Ceil(dur.Seconds() * ic.ARate))

	var baseFleet, burstFleet *FleetLoad
	baseline, baseSamples := measure(ctx, phase, target, label+" baseline", nA, func(ctx context.Context, r *runner) {
		stop := sampleFleet(ctx, target.EngineMetricsURLs, r.start.Add(burstAt), &baseFleet)
		defer stop()
		baseErr = r.tenant(ctx, target.Tenant, TenantA, keyA)
	})
	if baseErr != nil {
		return nil, baseErr
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: isolation baseline: %w", err)
	}
	burst, burstSamples := measure(ctx, phase, target, label+" burst", 0, func(ctx context.Context, r *runner) {
		stop := sampleFleet(ctx, target.EngineMetricsURLs, r.start.Add(burstAt), &burstFleet)
		defer stop()
		var wg sync.WaitGroup
		var errA, errB error
		wg.Go(func() { errA = r.tenant(ctx, target.Tenant, TenantA, keyA) })
		wg.Go(func() { errB = r.tenant(ctx, target.Tenant, TenantB, keyB) })
		switch {
		case cfg.BatchLoad.Lines == 0:
		case target.Tenant != nil:
			// The batch's client, too, in a process of its own: it
			// submits as the burst starts and follows the batch past the
			// run's end, up to its deadline.
			submitted = r.start.Add(burstAt)
			spec := TenantSpec{Config: r.cfg, Tenant: TenantBatch, Key: orKey(cfg.BatchLoad.Key, target.APIKey)}
			spec.Config.BatchLoad = cfg.BatchLoad
			batchApart = make(chan *BatchLoadReport, 1)
			go func() {
				rep, err := r.apart(ctx, target.Tenant, spec)
				if err != nil {
					rep = &BatchLoadReport{Lines: cfg.BatchLoad.Lines, Error: err.Error()}
				}
				batchApart <- rep
			}()
		case sleepUntil(ctx, r.start.Add(burstAt)):
			batch = startBatchLoad(ctx, cfg, target)
		}
		wg.Wait()
		burstErr = errors.Join(errA, errB)
		burstEnded = time.Now()
	})
	if batch != nil {
		burst.BatchLoad = batch(burstEnded)
	}
	if batchApart != nil {
		if burst.BatchLoad = <-batchApart; burst.BatchLoad == nil {
			burst.BatchLoad = &BatchLoadReport{Lines: cfg.BatchLoad.Lines, Error: "the batch's process reported nothing"}
		}
		burst.BatchLoad.RunSeconds = burstEnded.Sub(submitted).Seconds()
	}
	if burstErr != nil {
		return nil, burstErr
	}

	inWindow := func(samples []*Sample, tenant string) []*Sample {
		var out []*Sample
		for _, s := range samples {
			if s.Tenant == tenant && s.Start >= burstAt {
				out = append(out, s)
			}
		}
		return out
	}
	window := func(res *Result) time.Duration {
		return max(time.Duration(res.DurationSeconds*float64(time.Second))-burstAt, time.Millisecond)
	}
	bWindow := inWindow(burstSamples, TenantB)
	rep := &IsolationReport{
		WindowStartSeconds: burstAt.Seconds(),
		BLoops:             loops,
		BaselineA:          aggregate(inWindow(baseSamples, TenantA), window(baseline)),
		BurstA:             aggregate(inWindow(burstSamples, TenantA), window(burst)),
		BurstB:             aggregate(bWindow, window(burst)),
		Sheds:              burst.Total.Sheds,
		BMeanInFlight:      meanInFlight(bWindow, window(burst)),
		BaselineFleet:      baseFleet,
		BurstFleet:         burstFleet,
		Baseline:           baseline,
	}
	rep.BurstMultipleAchieved = rep.BMeanInFlight / float64(ic.FleetSlots)
	rep.BaselineAP99TTFTMs = rep.BaselineA.TTFT.P99Ms
	rep.BurstAP99TTFTMs = rep.BurstA.TTFT.P99Ms
	if rep.BaselineAP99TTFTMs > 0 {
		rep.P99TTFTRatio = rep.BurstAP99TTFTMs / rep.BaselineAP99TTFTMs
	}
	burst.Isolation = rep
	return burst, nil
}

func orKey(k, fallback string) string {
	if k != "" {
		return k
	}
	return fallback
}

// interactive sends tenant A's turns, open loop at ARate until the run
// stops: each a fresh conversation with A's system prompt and a question.
func (r *runner) interactive(ctx context.Context, key string) {
	ic, a := r.cfg.Isolation, r.cfg.Agentic
	interval := time.Duration(float64(time.Second) / ic.ARate)
	system := SystemPrompt(isolationPromptTenant, a.SystemPromptTokens, a.ToolSchemaTokens)
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		if !sleepUntil(ctx, r.start.Add(time.Duration(i)*interval)) || r.stopped(ctx) {
			break
		}
		wg.Go(func() {
			c := call{
				api:      r.cfg.API,
				key:      key,
				priority: BandInteractive,
				input: []Item{
					{Kind: ItemMessage, Role: "system", Text: system},
					{Kind: ItemMessage, Role: "user", Text: words(mix(domainUser, uint64(r.cfg.Seed), 0xa, uint64(i)), a.UserTurnTokens)},
				},
				maxTokens: a.OutputTokens,
			}
			r.do(ctx, c, labels{tenant: TenantA, turn: i, kind: TurnSingle})
		})
	}
	wg.Wait()
}

// agentLoop is one of tenant B's loops: from burstAt on, agent sessions
// back to back with no think time, until the run stops.
func (r *runner) agentLoop(ctx context.Context, loop int, burstAt time.Duration, key, priority string) {
	for round := 0; !r.stopped(ctx); round++ {
		s := burstSession(r.cfg, loop, round)
		s.Start += burstAt
		if round > 0 {
			s.Start = 0
		}
		r.session(ctx, s, TenantB, key, priority)
	}
}

// burstSession is round round of B's loop loop: one agent session of
// tool turns sent back to back. A loop with gaps between its turns keeps a
// request in flight only part of the time, so BLoops loops would offer the
// fleet a fraction of BurstMultiple × FleetSlots; without gaps each loop
// holds one request in flight all the time, as IsolationConfig promises.
func burstSession(cfg Config, loop, round int) Session {
	c := cfg
	c.Seed = int64(mix(uint64(cfg.Seed), 0xb, uint64(loop), uint64(round)) >> 1)
	c.Agentic.Sessions, c.Agentic.Waves, c.Agentic.Tenants = 1, 1, 1
	c.Agentic.HumanTurnShare = -1
	c.Agentic.LoopGap = 0
	return PlanAgentic(c)[0]
}

// meanInFlight is the mean number of samples in flight over wall: the sum
// of their durations (a failed request counts until it failed) over wall.
func meanInFlight(samples []*Sample, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	var busy time.Duration
	for _, s := range samples {
		busy += s.E2E
	}
	return busy.Seconds() / wall.Seconds()
}

// FleetLoad is the engines' occupancy over a window, summed over engines
// at each sample: sequences running in their batches, sequences waiting in
// their own queues, and the mean KV cache usage.
type FleetLoad struct {
	Samples     int     `json:"samples"`
	MeanRunning float64 `json:"mean_running"`
	MaxRunning  float64 `json:"max_running"`
	MeanWaiting float64 `json:"mean_waiting"`
	MaxWaiting  float64 `json:"max_waiting"`
	MaxKVUsage  float64 `json:"max_kv_usage"`
}

// Engine gauges FleetLoad reads, vLLM's and SGLang's names.
var (
	gaugesRunning = []string{"vllm:num_requests_running", "sglang:num_running_reqs"}
	gaugesWaiting = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	gaugesKV      = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
)

// fleetSampleInterval spaces the engine scrapes of sampleFleet: often
// enough for a 20s window, rarely enough to cost the host little.
const fleetSampleInterval = 250 * time.Millisecond

// add folds one scrape of every engine (nil entries failed) into l.
func (l *FleetLoad) add(scrape []EngineMetrics) {
	var running, waiting, kv float64
	engines := 0
	for _, m := range scrape {
		if m == nil {
			continue
		}
		engines++
		running += firstOf(m, gaugesRunning)
		waiting += firstOf(m, gaugesWaiting)
		kv += firstOf(m, gaugesKV)
	}
	if engines == 0 {
		return
	}
	n := float64(l.Samples)
	l.MeanRunning = (l.MeanRunning*n + running) / (n + 1)
	l.MeanWaiting = (l.MeanWaiting*n + waiting) / (n + 1)
	l.MaxRunning = max(l.MaxRunning, running)
	l.MaxWaiting = max(l.MaxWaiting, waiting)
	l.MaxKVUsage = max(l.MaxKVUsage, kv/float64(engines))
	l.Samples++
}

func firstOf(m EngineMetrics, names []string) float64 {
	for _, n := range names {
		if v, ok := m[n]; ok {
			return v
		}
	}
	return 0
}

// sampleFleet scrapes urls every fleetSampleInterval from from until the
// returned stop is called, then stores what it saw in *out (left nil when
// there are no urls or no sample succeeded). stop waits for the sampler.
func sampleFleet(ctx context.Context, urls []string, from time.Time, out **FleetLoad) (stop func()) {
	if len(urls) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var l FleetLoad
		defer func() {
			if l.Samples > 0 {
				*out = &l
			}
		}()
		if !sleepUntil(ctx, from) {
			return
		}
		t := time.NewTicker(fleetSampleInterval)
		defer t.Stop()
		for {
			scrape, _ := scrapeAll(ctx, urls)
			if ctx.Err() != nil {
				return
			}
			l.add(scrape)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// burstAt is when B's burst starts, from the run's start.
func (ic IsolationConfig) burstAt() time.Duration {
	return time.Duration(float64(ic.Duration.D()) * ic.BurstStart)
}

// loops is how many agent loops B keeps in flight.
func (ic IsolationConfig) loops() int {
	return int(math.Ceil(ic.BurstMultiple * float64(ic.FleetSlots)))
}
