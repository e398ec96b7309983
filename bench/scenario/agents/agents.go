package agents

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Report is the agents scenario's figures, phase by phase.
type Report struct {
	// TimeScale is the workload's clock (the fleet's, when embedded);
	// PrefillTokensPerSecond the floor's prefill rate on it (0: no floor).
	TimeScale              float64 `json:"time_scale"`
	PrefillTokensPerSecond float64 `json:"prefill_tokens_per_second,omitempty"`
	Phases                 []Phase `json:"phases"`
	// CPUError says why no CPU was profiled (another profile ran); empty
	// when it was.
	CPUError string `json:"cpu_error,omitempty"`
}

// Phase is the figures of the turns sent in one phase.
type Phase struct {
	// Agents is how many agents the phase keeps running; Seconds its
	// wall length.
	Agents  int     `json:"agents"`
	Seconds float64 `json:"seconds"`
	// Turns were sent in the phase; Answered ended with a whole stream.
	// Cut are those still streaming a quarter phase after the run's end,
	// cut then and counted in neither.
	Turns    int `json:"turns"`
	Answered int `json:"answered"`
	Cut      int `json:"cut,omitempty"`
	// TTFT of the answered turns, in ms.
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP90Ms float64 `json:"ttft_p90_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	// OutputTokensPerSec is the answered turns' output over the phase's
	// length.
	OutputTokensPerSec float64 `json:"output_tokens_per_sec"`
	// Errors are the turns that failed: 408, 429 and 503 answers, and
	// every other failure (other statuses, timeouts, cut streams).
	Errors   int `json:"errors"`
	Err408   int `json:"err_408"`
	Err429   int `json:"err_429"`
	Err503   int `json:"err_503"`
	ErrOther int `json:"err_other"`
	// PromptTokens, CachedTokens (the gateway's usage) and IdealTokens
	// (what an unbounded cache would have held) of the answered turns;
	// Captured is CachedTokens over IdealTokens.
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	IdealTokens  int64   `json:"ideal_tokens"`
	Captured     float64 `json:"captured"`
	// FloorP50Ms and FloorP90Ms are the answered turns' TTFT floors;
	// OverFloor is TTFT p50 over floor p50 (0: no floor).
	FloorP50Ms float64 `json:"floor_p50_ms"`
	FloorP90Ms float64 `json:"floor_p90_ms"`
	OverFloor  float64 `json:"over_floor"`
	// CPU is the process's CPU in the phase by who spent it;
	// ProcessCPUSeconds the kernel's count of the whole process's.
	CPU               CPUSplit `json:"cpu"`
	ProcessCPUSeconds float64  `json:"process_cpu_seconds"`
	// GatewayCPUPerTurnMs is the gateway's CPU (with its share of the
	// background GC) over the turns sent; GatewayCores the same over the
	// phase's length on the fleet's clock, in cores: what the gateway
	// would take of a host's cores in front of the hardware the fleet
	// models, at its speed (at --sim-time-scale 5 the phase takes five
	// times its length of wall time, and the gateway a fifth of this).
	GatewayCPUPerTurnMs float64 `json:"gateway_cpu_per_turn_ms"`
	GatewayCores        float64 `json:"gateway_cores"`
	// PeakRSSBytes is the process's largest resident set in the phase.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// minRequestTimeout is the least a request is given, on the workload's
// clock.
const minRequestTimeout = 10 * time.Minute

// rssEvery is how often RSS is sampled.
const rssEvery = 500 * time.Millisecond

// Run runs the agents through cfg's phases and reports each phase.
func Run(ctx context.Context, cfg workload.Config, target driver.Target, label string) (*driver.Result, *Report, error) {
	a := cfg.Agents
	scale := timeScale(cfg)
	phaseWall := time.Duration(float64(a.PhaseDuration) * scale)
	// An answer of thousands of tokens takes minutes of the fleet's
	// clock: a request is given at least ten of them, not the default's
	// two minutes of wall time, which a slowed clock turns into failures
	// of the bench's own.
	if t := workload.Duration(float64(minRequestTimeout) * scale); cfg.RequestTimeout < t {
		cfg.RequestTimeout = t
	}
	rep := &Report{TimeScale: scale, PrefillTokensPerSecond: a.PrefillTokensPerSecond, Phases: make([]Phase, len(a.Phases))}
	for k, n := range a.Phases {
		rep.Phases[k].Agents, rep.Phases[k].Seconds = n, phaseWall.Seconds()
	}
	// The progress bar's total: every agent's calls at one every ten
	// seconds of the workload's clock, about what the default fleet gives.
	var total float64
	for _, n := range a.Phases {
		total += float64(n) * a.PhaseDuration.D().Seconds() / 10
	}
	// Return the heap an earlier run in this process freed, so that the
	// phases' RSS is this run's.
	debug.FreeOSMemory()
	var res *driver.Result
	var samples []*driver.Sample
	var apartErr error
	asClient(ctx, func(ctx context.Context) {
		res, samples = driver.Measure(ctx, cfg, target, label, int(total), func(ctx context.Context, r *driver.Runner) {
			end := r.Started().Add(time.Duration(len(a.Phases)) * phaseWall)
			meter := meterPhases(r.Started(), phaseWall, rep, profileSaver(a.ProfileDir, label))
			defer meter()
			run := r.Until(end)
			// Answers still streaming a quarter phase after the end are
			// cut: the heavy tail would otherwise hold the run for as
			// long as its longest answer.
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			cut := time.AfterFunc(time.Until(end.Add(phaseWall/4)), cancel)
			defer cut.Stop()
			if target.Tenant == nil {
				runAgents(ctx, run)
				return
			}
			// The agents in a process of their own: this one's CPU and
			// RSS are then the gateway's, less the little it takes to
			// record their turns.
			spec := driver.TenantSpec{Config: r.Config(), Tenant: TenantAgents, Key: target.APIKey, From: r.Started(), Until: end}
			_, apartErr = r.Apart(ctx, target.Tenant, spec)
		})
	})
	if apartErr != nil {
		return nil, nil, apartErr
	}
	fillPhases(rep, cfg, target, samples, phaseWall, scale)
	res.Ideal = idealOf(rep, res)
	return res, rep, nil
}

// TenantAgents names the agents of a run as the tenant of a
// driver.TenantSpec: every agent, sent from one process of its own.
const TenantAgents = "agents"

// RunTenant runs every agent of spec's run in this process, from the
// run's start (spec.Start) until spec.Until, handing emit each turn as it
// ends (from several goroutines, one at a time): what the agents' process
// runs. Cancelling ctx cuts the turns in flight, which are handed to emit
// too, as the run's end cuts them in process.
func RunTenant(ctx context.Context, spec driver.TenantSpec, emit func(driver.TenantLine)) error {
	cfg := spec.Config
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Workload != workload.WorkloadAgents || spec.Tenant != TenantAgents {
		return fmt.Errorf("bench: the agents' process runs the agents workload, not %q (tenant %q)", cfg.Workload, spec.Tenant)
	}
	if spec.Start.IsZero() || !spec.Until.After(spec.Start) {
		return fmt.Errorf("bench: the agents' process needs the run's start and when it stops sending, after it")
	}
	target := driver.Target{BaseURL: spec.BaseURL, APIKey: spec.Key}
	driver.RunShare(ctx, cfg, target, spec, emit, runAgents)
	return nil
}

// timeScale is the workload's clock: wall seconds a second of it.
func timeScale(cfg workload.Config) float64 {
	if cfg.Agentic.TimeScale > 0 {
		return cfg.Agentic.TimeScale
	}
	return workload.DefaultTimeScale
}

// runAgents runs every agent of r's run until r stops.
func runAgents(ctx context.Context, r *driver.Runner) {
	cfg := r.Config()
	scale := timeScale(cfg)
	var wg sync.WaitGroup
	for i := range cfg.Agents.Phases[len(cfg.Agents.Phases)-1] {
		wg.Go(func() { runAgent(ctx, r, cfg, i, scale) })
	}
	wg.Wait()
}

// idealOf is the whole run's ideal reuse, the phases' summed, and the
// share of it the engines' own count captured.
func idealOf(rep *Report, res *driver.Result) *driver.IdealReuse {
	ideal := &driver.IdealReuse{Method: driver.IdealWorkload}
	for _, p := range rep.Phases {
		ideal.PromptTokens += float64(p.PromptTokens)
		ideal.CachedTokens += float64(p.IdealTokens)
	}
	if ideal.PromptTokens > 0 {
		ideal.HitRate = ideal.CachedTokens / ideal.PromptTokens
	}
	if ideal.HitRate > 0 && res.Engines != nil && res.Engines.Flavor != "" {
		ideal.CapturedShare = res.Engines.HitRate / ideal.HitRate
	}
	return ideal
}

// meterPhases profiles the process's CPU and samples its RSS phase by
// phase from start, into rep, until the function it returns is called
// (after which the last phase's figures are in).
func meterPhases(start time.Time, phaseWall time.Duration, rep *Report, save func(phase int, kind string, profile []byte) error) (stop func()) {
	prof := startCPUProfile()
	prof.save = save
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(rssEvery)
		defer tick.Stop()
		k, cpu := 0, processCPU()
		cut := func(last bool) {
			split, err := prof.cut(k, last)
			if err != nil && rep.CPUError == "" {
				rep.CPUError = err.Error()
			}
			now := processCPU()
			p := &rep.Phases[k]
			p.CPU, p.ProcessCPUSeconds = split, now-cpu
			cpu = now
		}
		for {
			select {
			case <-done:
				cut(true)
				return
			case now := <-tick.C:
				// Turns sent in the last phase run on past its end; its
				// figures take them in.
				for k < len(rep.Phases)-1 && now.Sub(start) >= time.Duration(k+1)*phaseWall {
					cut(false)
					k++
				}
				rep.Phases[k].PeakRSSBytes = max(rep.Phases[k].PeakRSSBytes, processRSS())
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// runAgent runs agent i's sessions, one after another, from its arrival
// until r stops.
func runAgent(ctx context.Context, r *driver.Runner, cfg workload.Config, i int, scale float64) {
	if !driver.SleepUntil(ctx, r.Started().Add(cfg.Agents.AgentArrival(i, scale))) {
		return
	}
	for n := 0; !r.Stopped(ctx); n++ {
		runSession(ctx, r, cfg, workload.AgentSession(cfg, i, n, scale))
	}
}

// maxRetryAfter bounds how long an agent honours a shed's Retry-After.
const maxRetryAfter = 10 * time.Second

// runSession sends s's turns one after another. A continuing turn sends
// its new items chained to the conversation's last answered response; an
// opening or resuming turn starts a conversation; a side call stands
// apart. A failed turn's items are carried into the next continuing turn,
// so the conversation the gateway sees stays whole.
func runSession(ctx context.Context, r *driver.Runner, cfg workload.Config, s workload.Session) {
	key := r.TenantKey(s.Tenant)
	tenant := fmt.Sprintf("t%d", s.Tenant)
	var prevID string
	var pending []workload.Item
	for i, t := range s.Turns {
		if i > 0 && !driver.SleepUntil(ctx, time.Now().Add(t.Delay)) {
			return
		}
		c := driver.Call{API: workload.APIResponses, Key: key, Priority: cfg.Priority, MaxTokens: t.MaxOutputTokens}
		switch {
		case t.Kind == workload.TurnSide:
			c.Input = t.Input
		case t.Kind.Continues():
			c.PreviousID, c.Input = prevID, slices.Concat(pending, t.Input)
		default:
			prevID, pending = "", nil
			c.Input = t.Input
		}
		smp, retryAfter := r.Do(ctx, c, driver.Labels{Tenant: tenant, Session: s.ID, Turn: i, Kind: t.Kind})
		// The text sent is the gateway's now (and pending's, if it
		// failed): the client keeps only what is still to send.
		s.Turns[i].Input = nil
		if smp == nil {
			return
		}
		if smp.Error != "" {
			if t.Kind != workload.TurnSide {
				pending = c.Input
			}
			if smp.Shed && retryAfter > 0 && !driver.SleepUntil(ctx, time.Now().Add(min(retryAfter, maxRetryAfter))) {
				return
			}
			continue
		}
		if t.Kind != workload.TurnSide {
			prevID, pending = smp.ResponseID, nil
		}
	}
}

// fillPhases computes each phase's figures from the run's samples.
func fillPhases(rep *Report, cfg workload.Config, target driver.Target, samples []*driver.Sample, phaseWall time.Duration, scale float64) {
	ideal := idealTokens(cfg, target, samples)
	type acc struct{ ttft, floor []float64 }
	accs := make([]acc, len(rep.Phases))
	for _, s := range samples {
		k := min(int(s.Start/phaseWall), len(rep.Phases)-1)
		p, a := &rep.Phases[k], &accs[k]
		if s.Cut() {
			p.Cut++
			continue
		}
		p.Turns++
		if s.Error != "" {
			p.Errors++
			switch s.Status {
			case 408:
				p.Err408++
			case 429:
				p.Err429++
			case 503:
				p.Err503++
			default:
				p.ErrOther++
			}
			continue
		}
		p.Answered++
		p.PromptTokens += int64(s.InputTokens)
		p.CachedTokens += int64(s.CachedTokens)
		p.IdealTokens += int64(ideal[s])
		p.OutputTokensPerSec += float64(s.OutputTokens)
		a.ttft = append(a.ttft, float64(s.TTFT)/float64(time.Millisecond))
		if rate := rep.PrefillTokensPerSecond; rate > 0 {
			uncached := float64(s.InputTokens - ideal[s])
			a.floor = append(a.floor, uncached/rate*scale*1000)
		}
	}
	for k := range rep.Phases {
		p, a := &rep.Phases[k], &accs[k]
		p.OutputTokensPerSec /= phaseWall.Seconds()
		if p.IdealTokens > 0 {
			p.Captured = float64(p.CachedTokens) / float64(p.IdealTokens)
		}
		t, f := driver.Summarize(a.ttft), driver.Summarize(a.floor)
		p.TTFTP50Ms, p.TTFTP90Ms, p.TTFTP99Ms = t.P50Ms, t.P90Ms, t.P99Ms
		p.FloorP50Ms, p.FloorP90Ms = f.P50Ms, f.P90Ms
		if f.P50Ms > 0 {
			p.OverFloor = t.P50Ms / f.P50Ms
		}
		if p.Turns > 0 {
			p.GatewayCPUPerTurnMs = 1000 * p.CPU.GatewayWithGC() / float64(p.Turns)
		}
		p.GatewayCores = p.CPU.GatewayWithGC() * scale / phaseWall.Seconds()
	}
}

// idealTokens is each answered sample's ideal reuse, in tokens: what an
// unbounded cache would hold of its prompt from earlier calls, in whole
// blocks, never its last token. A continuing call reuses its
// conversation's last answered prompt and answer; an opening, resuming
// or side call, or a continuing one with nothing answered before it, its
// tenant's system prompt once an earlier call carried it.
func idealTokens(cfg workload.Config, target driver.Target, samples []*driver.Sample) map[*driver.Sample]int {
	const block = 16
	whole := func(n int) int { return max(n, 0) / block * block }
	sorted := slices.Clone(samples)
	slices.SortStableFunc(sorted, func(a, b *driver.Sample) int { return int(a.Start - b.Start) })
	a := cfg.Agents
	system := map[string]int{} // each tenant's system prompt, in tokens
	shared := func(tenant string) int {
		n, ok := system[tenant]
		if !ok {
			var t int
			fmt.Sscanf(tenant, "t%d", &t)
			text := workload.SystemPrompt(t, a.SystemTokens, a.ToolSchemaTokens)
			if target.SystemTokens != nil {
				n = target.SystemTokens(text)
			} else {
				// The simulator's chat template and 4 bytes a token.
				n = (len("<|system|>\n") + len(text)) / workload.BytesPerToken
			}
			system[tenant] = n
		}
		return n
	}
	prev := map[string]*driver.Sample{} // each conversation's last answered call
	seen := map[string]bool{}           // tenants whose system prompt was answered
	out := make(map[*driver.Sample]int, len(samples))
	for _, s := range sorted {
		if s.Error != "" {
			if s.Kind == workload.TurnOpen || s.Kind == workload.TurnResume {
				// The next call sends the conversation's start again.
				delete(prev, s.Session)
			}
			continue
		}
		var hit int
		if p := prev[s.Session]; p != nil && s.Kind.Continues() {
			hit = p.InputTokens + p.OutputTokens
		} else if seen[s.Tenant] {
			hit = shared(s.Tenant)
		}
		out[s] = min(whole(hit), whole(s.InputTokens-1))
		seen[s.Tenant] = true
		if s.Kind != workload.TurnSide {
			prev[s.Session] = s
		}
	}
	return out
}
