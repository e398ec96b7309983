package isolation

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Tenant labels of the isolation scenario.
const (
	TenantA = "A"
	TenantB = "B"
)

// promptTenant gives tenant A a system prompt of its own, apart
// from the agentic tenants' (B's loops use agentic tenant 0's).
const promptTenant = 1000

// Report is the isolation scenario's verdict: tenant A's
// interactive latency alone and under tenant B's burst, and what the
// gateway shed. Both conditions come from one run that alternates them
// (schedule): A's figures alone are its turns sent in its stretches
// alone, from the moment B's previous burst had ended; under the burst,
// its turns sent while B's loops were sending.
type Report struct {
	// WindowStartSeconds is when A's first stretch alone began, after the
	// warm-up.
	WindowStartSeconds float64 `json:"window_start_seconds"`
	// BLoops is how many agent loops B kept in flight during the burst.
	BLoops int `json:"b_loops"`
	// BaselineA and BurstA are A's requests alone and under the burst;
	// BurstB is B's requests.
	BaselineA driver.Summary `json:"baseline_a"`
	BurstA    driver.Summary `json:"burst_a"`
	BurstB    driver.Summary `json:"burst_b"`
	// P99TTFT of A in each condition, and burst/baseline (0 when undefined).
	BaselineAP99TTFTMs float64 `json:"baseline_a_p99_ttft_ms"`
	BurstAP99TTFTMs    float64 `json:"burst_a_p99_ttft_ms"`
	P99TTFTRatio       float64 `json:"p99_ttft_ratio"`
	// Rounds are the stretches of the run, in order, with A's p99 in each.
	Rounds []Round `json:"rounds"`
	// Sheds counts the requests shed under the burst by band, then reason.
	Sheds map[string]map[string]int `json:"sheds,omitempty"`
	// BMeanInFlight is how many of B's requests were in flight on average
	// under the burst (the sum of their durations over the burst's
	// stretches), and BurstMultipleAchieved is that over FleetSlots: the
	// burst the run really offered, to set against the configured
	// BurstMultiple.
	BMeanInFlight         float64 `json:"b_mean_in_flight"`
	BurstMultipleAchieved float64 `json:"burst_multiple_achieved"`
	// BaselineFleet and BurstFleet are the engines' own occupancy in each
	// condition's stretches, sampled from their /metrics; nil without
	// Target.EngineMetricsURLs. Engines that queue (MaxWaiting > 0) or run
	// near their KV capacity were past their capacity; engines that never
	// queue were not, whatever the burst multiple says.
	BaselineFleet *FleetLoad `json:"baseline_fleet,omitempty"`
	BurstFleet    *FleetLoad `json:"burst_fleet,omitempty"`
	// Baseline is A's turns alone as a result of their own.
	Baseline *driver.Result `json:"baseline"`
}

// Round is one round of the run: A's stretch alone (from when
// B's previous burst had ended) and its stretch under B's burst, in
// seconds from the run's start, with A's p99 TTFT in each.
type Round struct {
	AloneFromSeconds float64 `json:"alone_from_s"`
	AloneToSeconds   float64 `json:"alone_to_s"`
	BurstFromSeconds float64 `json:"burst_from_s"`
	BurstToSeconds   float64 `json:"burst_to_s"`
	AloneP99TTFTMs   float64 `json:"alone_p99_ttft_ms"`
	BurstP99TTFTMs   float64 `json:"burst_p99_ttft_ms"`
	// AloneTurns and BurstTurns are A's turns in each stretch: a stretch
	// alone that a long drain cut short holds fewer.
	AloneTurns int `json:"alone_turns"`
	BurstTurns int `json:"burst_turns"`
	// BDrainSeconds is how long B's last requests of this burst ran past
	// its stretch; the next stretch alone starts after them.
	BDrainSeconds float64 `json:"b_drain_s"`
}

// schedule is the isolation run's plan: a warm-up of A alone, then
// rounds rounds, each a stretch of A alone and a stretch under B's burst,
// each burst followed by a pause in which its last requests end. A sends
// throughout. The two conditions take turns, so that the host's drift,
// which on a shared machine moves a p99 as much as the burst does, falls
// on both. The plan gives the stretches' lengths; when they start is
// decided as the run goes (Run), since how long A takes to start and B's
// burst takes to end depends on the host.
type schedule struct {
	rounds int
	// settle is both the least warm-up and the least pause after each burst.
	stretch, settle time.Duration
}

// scheduleOf is ic's schedule.
func scheduleOf(ic workload.IsolationConfig) schedule {
	n := max(ic.Rounds, 1)
	stretch := ic.Duration.D() / time.Duration(n)
	return schedule{rounds: n, stretch: stretch, settle: time.Duration(float64(stretch) * ic.Settle)}
}

// condition is what the run is measuring at a moment, for the fleet's
// samplers.
type condition int32

const (
	between condition = iota // warm-up, or a burst ending
	alone                    // A's stretch alone
	burst                    // A's stretch under B's burst
)

// stretches are one round as it ran, from the run's start: A alone, B's
// burst, and when the burst's last request (or its batch) had ended.
type stretches struct {
	aloneFrom, aloneTo, burstFrom, burstTo, ended time.Duration
}

// Run runs the scenario's one run (schedule) and returns it
// with the report attached.
func Run(ctx context.Context, cfg workload.Config, target driver.Target, label string) (*driver.Result, *Report, error) {
	ic := cfg.Isolation
	plan, loops := scheduleOf(ic), loopsOf(ic)
	phase := cfg
	// The run ends when its last burst has; A is stopped then.
	phase.MaxDuration = 0
	// A batch is submitted as each burst starts, not by driver.Measure.
	phase.BatchLoad.Lines = 0
	keyA, keyB := target.Key(ic.KeyA), target.Key(ic.KeyB)

	var aloneFleet, burstFleet *FleetLoad
	var errA error
	errB := make([]error, plan.rounds)
	batches := make([]*driver.BatchLoadReport, plan.rounds)
	var rounds []stretches
	// B's requests are not known in advance, so the progress has no total.
	res, samples := driver.Measure(ctx, phase, target, label, 0, func(ctx context.Context, dr *driver.Runner) {
		r := runner{dr}
		var now atomic.Int32
		is := func(c condition) func() bool { return func() bool { return condition(now.Load()) == c } }
		stopAlone := sampleFleet(ctx, target.EngineMetricsURLs, is(alone), &aloneFleet)
		stopBurst := sampleFleet(ctx, target.EngineMetricsURLs, is(burst), &burstFleet)
		defer stopAlone()
		defer stopBurst()
		since := func() time.Duration { return time.Since(r.Started()) }
		sleep := func(d time.Duration) bool { return driver.SleepUntil(ctx, r.Started().Add(d)) }

		// A sends until the last burst has ended. Its stop ends its
		// sending, not its requests in flight.
		stopA, cancelA := context.WithCancel(ctx)
		doneA := make(chan struct{})
		go func() {
			defer close(doneA)
			errA = r.tenant(ctx, stopA, target.Tenant, driver.TenantSpec{Tenant: TenantA, Key: keyA, From: r.Started()})
		}()
		defer func() { cancelA(); <-doneA }()
		// The warm-up lasts until A's first turn has ended (its process
		// may be slow to start), and at least settle.
		if !sleep(plan.settle) || !r.AwaitRecorded(ctx, 1) {
			return
		}
		for k := range plan.rounds {
			var st stretches
			st.aloneFrom = since()
			st.burstFrom = st.aloneFrom + plan.stretch
			st.aloneTo, st.burstTo = st.burstFrom, st.burstFrom+plan.stretch
			now.Store(int32(alone))
			// B's loops and the batch's client start now and wait for
			// the burst: a tenant's process is slow to start on a busy
			// host, and its start would eat into the burst.
			var wg sync.WaitGroup
			spec := driver.TenantSpec{Tenant: TenantB, Key: keyB, Round: k, From: r.Started().Add(st.burstFrom), Until: r.Started().Add(st.burstTo)}
			wg.Go(func() { errB[k] = r.tenant(ctx, ctx, target.Tenant, spec) })
			if cfg.BatchLoad.Lines > 0 {
				spec := driver.TenantSpec{Tenant: TenantBatch, Key: target.Key(cfg.BatchLoad.Key), Round: k, From: spec.From, Until: spec.Until}
				spec.Config = r.Config()
				spec.Config.BatchLoad = cfg.BatchLoad
				wg.Go(func() { batches[k] = r.batch(ctx, target, spec) })
			}
			if !sleep(st.burstFrom) {
				wg.Wait()
				return
			}
			now.Store(int32(burst))
			ok := sleep(st.burstTo)
			now.Store(int32(between))
			// The next stretch alone starts once the burst's last
			// request and its batch have ended, and settle has passed.
			wg.Wait()
			st.ended = since()
			rounds = append(rounds, st)
			if !ok || !sleep(max(st.ended, st.burstTo+plan.settle)) {
				return
			}
		}
	})
	if err := errors.Join(append(errB, errA)...); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("bench: isolation: %w", err)
	}
	if len(rounds) == 0 {
		return nil, nil, fmt.Errorf("bench: isolation: the run ended before its first round")
	}
	if cfg.BatchLoad.Lines > 0 {
		res.BatchLoad = mergeBatchReports(batches)
	}

	rep := &Report{BLoops: loops}
	var aloneA, burstA, burstAll, burstB []*driver.Sample
	var aloneWall, burstWall time.Duration
	for _, st := range rounds {
		round := Round{AloneFromSeconds: st.aloneFrom.Seconds(), AloneToSeconds: st.aloneTo.Seconds(),
			BurstFromSeconds: st.burstFrom.Seconds(), BurstToSeconds: st.burstTo.Seconds(),
			BDrainSeconds: max(st.ended-st.burstTo, 0).Seconds()}
		var under []*driver.Sample
		var alone []*driver.Sample
		for _, s := range samples {
			switch {
			case s.Tenant == TenantA && s.Start >= st.aloneFrom && s.Start < st.aloneTo:
				alone = append(alone, s)
			case s.Start >= st.burstFrom && s.Start < st.burstTo:
				burstAll = append(burstAll, s)
				if s.Tenant == TenantA {
					under = append(under, s)
				} else if s.Tenant == TenantB {
					burstB = append(burstB, s)
				}
			}
		}
		round.AloneTurns, round.BurstTurns = len(alone), len(under)
		round.AloneP99TTFTMs = driver.Aggregate(alone, plan.stretch).TTFT.P99Ms
		round.BurstP99TTFTMs = driver.Aggregate(under, plan.stretch).TTFT.P99Ms
		rep.Rounds = append(rep.Rounds, round)
		aloneA, burstA = append(aloneA, alone...), append(burstA, under...)
		aloneWall, burstWall = aloneWall+plan.stretch, burstWall+plan.stretch
	}
	aloneWall, burstWall = max(aloneWall, time.Millisecond), max(burstWall, time.Millisecond)
	rep.WindowStartSeconds = rep.Rounds[0].AloneFromSeconds
	rep.BaselineA = driver.Aggregate(aloneA, aloneWall)
	rep.BurstA = driver.Aggregate(burstA, burstWall)
	rep.BurstB = driver.Aggregate(burstB, burstWall)
	rep.Sheds = driver.Aggregate(burstAll, burstWall).Sheds
	rep.BMeanInFlight = meanInFlight(burstB, burstWall)
	rep.BurstMultipleAchieved = rep.BMeanInFlight / float64(ic.FleetSlots)
	rep.BaselineFleet, rep.BurstFleet = aloneFleet, burstFleet
	rep.Baseline = driver.BuildResult(phase, res.Started, aloneWall, aloneA)
	rep.BaselineAP99TTFTMs = rep.BaselineA.TTFT.P99Ms
	rep.BurstAP99TTFTMs = rep.BurstA.TTFT.P99Ms
	if rep.BaselineAP99TTFTMs > 0 {
		rep.P99TTFTRatio = rep.BurstAP99TTFTMs / rep.BaselineAP99TTFTMs
	}
	return res, rep, nil
}

// batch submits spec's batch at spec.From, here or through run when the
// tenants run apart, and follows it to its end or deadline.
func (r runner) batch(ctx context.Context, target driver.Target, spec driver.TenantSpec) *driver.BatchLoadReport {
	var rep *driver.BatchLoadReport
	if target.Tenant != nil {
		var err error
		if rep, err = r.Apart(ctx, target.Tenant, spec); err != nil {
			rep = &driver.BatchLoadReport{Lines: spec.Config.BatchLoad.Lines, Error: err.Error()}
		} else if rep == nil {
			rep = &driver.BatchLoadReport{Lines: spec.Config.BatchLoad.Lines, Error: "the batch's process reported nothing"}
		}
	} else {
		if !driver.SleepUntil(ctx, spec.From) {
			return nil
		}
		rep = driver.StartBatchLoad(ctx, spec.Config, target)(spec.Until)
	}
	if rep != nil {
		rep.RunSeconds = spec.Until.Sub(spec.From).Seconds()
	}
	return rep
}

// mergeBatchReports sums the batches of a run's bursts into one report:
// their lines, what became of them, the slowest one's time and status
// when any fell short.
func mergeBatchReports(reps []*driver.BatchLoadReport) *driver.BatchLoadReport {
	out := &driver.BatchLoadReport{Status: "completed", InDeadline: true}
	var ids, errs []string
	for _, b := range reps {
		if b == nil {
			continue
		}
		ids = append(ids, b.ID)
		if b.Error != "" {
			errs = append(errs, b.Error)
		}
		out.Lines += b.Lines
		out.Completed += b.Completed
		out.Failed += b.Failed
		out.Seconds = max(out.Seconds, b.Seconds)
		out.RunSeconds = max(out.RunSeconds, b.RunSeconds)
		out.InDeadline = out.InDeadline && b.InDeadline
		if b.Status != "completed" {
			out.Status = b.Status
		}
	}
	out.ID = strings.Join(ids, ",")
	out.Error = strings.Join(errs, "; ")
	return out
}

// interactive sends tenant A's turns, open loop at ARate until stop ends
// or the run stops: each a fresh conversation with A's system prompt and
// a question. It returns when the turns in flight have ended; ctx ending
// cuts them short.
func (r runner) interactive(ctx, stop context.Context, key string) {
	cfg := r.Config()
	ic, a := cfg.Isolation, cfg.Agentic
	interval := time.Duration(float64(time.Second) / ic.ARate)
	system := workload.SystemPrompt(promptTenant, a.SystemPromptTokens, a.ToolSchemaTokens)
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		if !driver.SleepUntil(stop, r.Started().Add(time.Duration(i)*interval)) || r.Stopped(stop) {
			break
		}
		wg.Go(func() {
			c := driver.Call{
				API:      cfg.API,
				Key:      key,
				Priority: workload.BandInteractive,
				Input: []workload.Item{
					{Kind: workload.ItemMessage, Role: "system", Text: system},
					{Kind: workload.ItemMessage, Role: "user", Text: workload.UserText(a.UserTurnTokens, uint64(cfg.Seed), 0xa, uint64(i))},
				},
				MaxTokens: a.OutputTokens,
			}
			r.Do(ctx, c, driver.Labels{Tenant: TenantA, Turn: i, Kind: workload.TurnSingle})
		})
	}
	wg.Wait()
}

// agentLoop is one of tenant B's loops in burst burst: from from on, agent
// sessions back to back with no think time, until the runner stops.
func (r runner) agentLoop(ctx context.Context, burst, loop int, from time.Duration, key, priority string) {
	for round := 0; !r.Stopped(ctx); round++ {
		s := burstSession(r.Config(), burst, loop, round)
		s.Start += from
		if round > 0 {
			s.Start = 0
		}
		r.Session(ctx, s, TenantB, key, priority)
	}
}

// burstSession is round round of B's loop loop in burst burst: one agent session of
// tool turns sent back to back. A loop with gaps between its turns keeps a
// request in flight only part of the time, so BLoops loops would offer the
// fleet a fraction of BurstMultiple × FleetSlots; without gaps each loop
// holds one request in flight all the time, as workload.IsolationConfig promises.
func burstSession(cfg workload.Config, burst, loop, round int) workload.Session {
	c := cfg
	c.Seed = int64(workload.Mix(uint64(cfg.Seed), 0xb, uint64(burst), uint64(loop), uint64(round)) >> 1)
	c.Agentic.Sessions, c.Agentic.Waves, c.Agentic.Tenants = 1, 1, 1
	c.Agentic.HumanTurnShare = -1
	c.Agentic.LoopGap = 0
	return workload.PlanAgentic(c)[0]
}

// meanInFlight is the mean number of samples in flight over wall: the sum
// of their durations (a failed request counts until it failed) over wall.
func meanInFlight(samples []*driver.Sample, wall time.Duration) float64 {
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

// fleetSampleInterval spaces the engine scrapes of sampleFleet: often
// enough for a 20s window, rarely enough to cost the host little.
const fleetSampleInterval = 250 * time.Millisecond

// add folds one scrape of every engine (nil entries failed) into l.
func (l *FleetLoad) add(scraped []scrape.EngineMetrics) {
	var running, waiting, kv float64
	engines := 0
	for _, m := range scraped {
		if m == nil {
			continue
		}
		engines++
		r, _ := m.Running()
		w, _ := m.Waiting()
		u, _ := m.KVUsage()
		running, waiting, kv = running+r, waiting+w, kv+u
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

// sampleFleet scrapes urls every fleetSampleInterval while in holds,
// until the returned stop is called, then stores
// what it saw in *out (left nil when there are no urls or no sample
// succeeded). stop waits for the sampler.
func sampleFleet(ctx context.Context, urls []string, in func() bool, out **FleetLoad) (stop func()) {
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
		t := time.NewTicker(fleetSampleInterval)
		defer t.Stop()
		for {
			if in() {
				scraped, _ := scrape.All(ctx, urls)
				if ctx.Err() != nil {
					return
				}
				l.add(scraped)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// loopsOf is how many agent loops B keeps in flight.
func loopsOf(ic workload.IsolationConfig) int {
	return int(math.Ceil(ic.BurstMultiple * float64(ic.FleetSlots)))
}

// runner is the driver's runner with the scenario's own ways of sending.
type runner struct{ *driver.Runner }
