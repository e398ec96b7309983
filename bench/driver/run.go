package driver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Sample is the record of one request.
type Sample struct {
	// Tenant and Band label the request: tenant "t0", "t1"... for agentic
	// sessions, "trace" for trace replay, "A" and "B" in the isolation
	// scenario; band is the priority header sent, or "unset".
	Tenant  string            `json:"tenant"`
	Band    string            `json:"band"`
	Session string            `json:"session,omitempty"`
	Turn    int               `json:"turn"`
	Kind    workload.TurnKind `json:"kind"`
	// API is the API the request used: "responses" or "chat".
	API string `json:"api"`
	// Start is when the request was sent, from the run's start.
	Start time.Duration `json:"start_ns"`
	// TTFT is sent → first content delta (0: none arrived); E2E is sent →
	// stream end or failure.
	TTFT time.Duration `json:"ttft_ns"`
	E2E  time.Duration `json:"e2e_ns"`
	// Token counts from usage; OutputTokens falls back to the number of
	// content deltas when usage is missing.
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// Status is the HTTP status (0: none arrived).
	Status int `json:"status"`
	// Streamed is true once the first stream event arrived: a failure
	// after it was seen mid-answer, one before it before any answer.
	Streamed bool `json:"streamed,omitempty"`
	// Error is the failure class, "" on success; ErrorCode the code of an
	// HTTP error's body ("no-endpoints"), if it had one.
	Error     string `json:"error,omitempty"`
	ErrorCode string `json:"error_code,omitempty"`
	// Shed is true when the gateway refused the request (429, or 503 with a
	// dropped reason); DroppedReason is its x-turnpike-dropped-reason.
	Shed          bool   `json:"shed,omitempty"`
	DroppedReason string `json:"dropped_reason,omitempty"`
	// ResponseID is the response (or chat completion) id;
	// PreviousResponseID the id this turn chained to.
	ResponseID         string `json:"response_id,omitempty"`
	PreviousResponseID string `json:"previous_response_id,omitempty"`

	itl []time.Duration
}

// Cut reports whether the bench cancelled the request itself (the run's
// end, or the bench stopped) before it ended: sent, but neither answered
// nor failed.
func (s *Sample) Cut() bool { return s.Error == ErrClassCanceled }

// Result is what one measured run yields: its requests' figures, the
// engines' own account, the loads beside it. It marshals to JSON as is, as
// the run's Result does (the same fields in the same order, without a
// scenario's verdict).
type Result struct {
	Workload string          `json:"workload"`
	API      string          `json:"api"`
	Config   workload.Config `json:"config"`
	Started  time.Time       `json:"started"`
	// DurationSeconds is the wall time from the first request due to the
	// last one ended; rates are over it.
	DurationSeconds float64 `json:"duration_seconds"`
	// Total covers every request; ByTenant and ByBand split it.
	Total    Summary             `json:"total"`
	ByTenant map[string]*Summary `json:"by_tenant"`
	ByBand   map[string]*Summary `json:"by_band"`
	// Engines is the engines' own prefix-cache account; nil when
	// Target.EngineMetricsURLs is empty.
	Engines *scrape.EngineCache `json:"engines,omitempty"`
	// CachePrediction is the gateway's prediction of the cached tokens of
	// the run's turns against what the engines reported; nil when the
	// gateway's /metrics has none (a policy without a KV-cache index).
	CachePrediction *scrape.CachePrediction `json:"cache_prediction,omitempty"`
	// Ideal is the prefix reuse an ideal router could have won, and the
	// share of it the engines captured; nil for the isolation scenario.
	Ideal    *IdealReuse `json:"ideal,omitempty"`
	CDF      CDF         `json:"cdf"`
	Timeline Timeline    `json:"timeline"`
	// Occupancy is the fleet and the gateway's queue sampled once a
	// second; nil without engine metrics.
	Occupancy *scrape.Occupancy `json:"occupancy,omitempty"`
	// Cost is what the run's tokens cost per pool and overall, with the
	// SLO attainment it came at; nil without Target.Cost.
	Cost *CostReport `json:"cost,omitempty"`
	// Interference is what Config.Interference's client sent, apart from
	// the run's figures; nil when none ran.
	Interference *InterferenceReport `json:"interference,omitempty"`
	// BatchLoad is what became of Config.BatchLoad's batch; nil when none
	// was offered.
	BatchLoad *BatchLoadReport `json:"batch_load,omitempty"`
	// Samples are every request's records when Config.KeepSamples is set.
	Samples []Sample `json:"samples,omitempty"`
}

// RunAgentic runs the agentic workload: cfg's planned sessions, and the
// ideal reuse of what they sent.
func RunAgentic(ctx context.Context, cfg workload.Config, target Target, label string) *Result {
	sessions := workload.PlanAgentic(cfg)
	res, samples := Measure(ctx, cfg, target, label, len(sessions)*cfg.Agentic.TurnsPerSession, func(ctx context.Context, r *Runner) {
		r.Sessions(ctx, sessions)
	})
	res.setIdeal(idealAgenticReuse(cfg, samples, idealBlockSize, target.SystemTokens))
	return res
}

// RunTrace replays cfg's trace, and the ideal reuse of what was sent.
func RunTrace(ctx context.Context, cfg workload.Config, target Target, label string) (*Result, error) {
	reqs, err := workload.LoadTrace(cfg.Trace)
	if err != nil {
		return nil, err
	}
	res, samples := Measure(ctx, cfg, target, label, len(reqs), func(ctx context.Context, r *Runner) {
		r.Replay(ctx, reqs)
	})
	// The ideal covers the requests that were sent.
	sent := reqs[:min(len(samples), len(reqs))]
	res.setIdeal(IdealTraceReuse(sent, target.KVCapacityTokens))
	return res, nil
}

// Sessions runs the planned sessions: all at their start times (open loop),
// or at most Agentic.Concurrency at once, each starting as soon as a
// running one ends (closed loop).
func (r *Runner) Sessions(ctx context.Context, sessions []workload.Session) {
	var wg sync.WaitGroup
	defer wg.Wait()
	var slots chan struct{}
	if n := r.cfg.Agentic.Concurrency; n > 0 {
		slots = make(chan struct{}, n)
	}
	for _, s := range sessions {
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if r.Stopped(ctx) {
				return
			}
		}
		key := r.TenantKey(s.Tenant)
		wg.Go(func() {
			if slots != nil {
				defer func() { <-slots }()
			}
			r.Session(ctx, s, fmt.Sprintf("t%d", s.Tenant), key, r.cfg.Priority)
		})
	}
}

// occupancyEvery is the occupancy sampler's interval in wall time: a
// second on the fleet's clock, and not more often than a wall second. A
// simulated fleet slowed for the bench is sampled as often per turn as
// the hardware it models would be, not ten times as often: each sample
// is a scrape of the gateway's whole /metrics, work of the bench's that
// the gateway's own figures would count.
func occupancyEvery(cost *CostSetup) time.Duration {
	if cost == nil || cost.ClockScale <= 0 || cost.ClockScale >= 1 {
		return scrape.OccupancyInterval
	}
	return time.Duration(min(float64(scrape.OccupancyInterval)/cost.ClockScale, float64(time.Hour)))
}

// Measure scrapes the engines, runs drive, scrapes again and builds the
// result; it also returns the samples for callers that slice them further.
func Measure(ctx context.Context, cfg workload.Config, target Target, label string, total int, drive func(context.Context, *Runner)) (*Result, []*Sample) {
	var before []scrape.EngineMetrics
	var scrapeErrs []string
	if len(target.EngineMetricsURLs) > 0 {
		before, scrapeErrs = scrape.All(ctx, target.EngineMetricsURLs)
	}
	// A gateway without the figures (or unreachable) leaves them out.
	cacheBefore, _ := scrape.ScrapeCachePrediction(ctx, target.GatewayMetrics())
	r := newRunner(cfg, target, label, total)
	stopOccupancy := scrape.SampleOccupancy(ctx, target.EngineMetricsURLs, target.GatewayMetrics(), r.start, occupancyEvery(target.Cost))
	r.prog.run()
	stopInterference := startInterference(ctx, cfg, target)
	stopBatch := StartBatchLoad(ctx, cfg, target)
	drive(ctx, r)
	wall := time.Since(r.start)
	r.snd.close()
	interference := stopInterference()
	batch := stopBatch(r.start.Add(wall))
	r.prog.close()
	occupancy := stopOccupancy()

	r.mu.Lock()
	samples := r.mu.samples
	r.mu.Unlock()
	res := BuildResult(r.cfg, r.start, wall, samples)
	res.Occupancy = occupancy
	res.Interference = interference
	res.BatchLoad = batch
	if cacheBefore != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		after, _ := scrape.ScrapeCachePrediction(sctx, target.GatewayMetrics())
		cancel()
		res.CachePrediction = scrape.CachePredictionDelta(cacheBefore, after)
	}
	if len(target.EngineMetricsURLs) > 0 {
		// Scrape even when ctx is done: the figures so far are still wanted.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		after, errs := scrape.All(sctx, target.EngineMetricsURLs)
		cancel()
		res.Engines = scrape.Delta(before, after, append(scrapeErrs, errs...))
		res.Cost = costReport(target.Cost, before, after, wall, occupancy, samples)
		excludeInterference(res.Engines, interference)
	}
	return res, samples
}

// Runner drives one run. Its fields are set before the first request and
// only read afterwards, except mu's.
type Runner struct {
	cfg    workload.Config
	target Target
	snd    *sender
	pace   *pacer        // nil: no rate cap
	slots  chan struct{} // nil: no in-flight cap
	start  time.Time
	stopAt time.Time // zero: none
	prog   *progress
	// emit, when set, is handed every request as it is recorded.
	emit func(*Sample)
	// into, when set, records this runner's requests in its stead (until).
	into *Runner

	mu struct {
		sync.Mutex
		// samples in completion order.
		samples []*Sample
	}
}

func newRunner(cfg workload.Config, target Target, label string, total int) *Runner {
	r := &Runner{
		cfg:    cfg,
		target: target,
		snd:    newSender(cfg, target, cfg.API == workload.APIChat || cfg.Workload == workload.WorkloadChaos),
		prog:   newProgress(cfg.Progress, label, total),
	}
	keys := []string{target.APIKey, cfg.Isolation.KeyA, cfg.Isolation.KeyB}
	r.snd.prepare(append(keys, cfg.TenantKeys...)...)
	if cfg.Rate > 0 {
		r.pace = &pacer{interval: time.Duration(float64(time.Second) / cfg.Rate)}
	}
	if cfg.MaxInFlight > 0 {
		r.slots = make(chan struct{}, cfg.MaxInFlight)
	}
	r.start = time.Now()
	if cfg.MaxDuration > 0 {
		r.stopAt = r.start.Add(cfg.MaxDuration.D())
	}
	return r
}

// Config is the run's config.
func (r *Runner) Config() workload.Config { return r.cfg }

// Target is the gateway under test.
func (r *Runner) Target() Target { return r.target }

// Started is when the run started; every Sample's Start counts from it.
func (r *Runner) Started() time.Time { return r.start }

// StopAt is when the runner stops sending; zero: when its workload ends.
func (r *Runner) StopAt() time.Time { return r.stopAt }

// Recorded is how many requests the run has recorded so far.
func (r *Runner) Recorded() int {
	if r.into != nil {
		return r.into.Recorded()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.samples)
}

// AwaitRecorded waits until the run has recorded n requests; false when
// ctx ended first.
func (r *Runner) AwaitRecorded(ctx context.Context, n int) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for r.Recorded() < n {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// Client is key's OpenAI client, made before the run started.
func (r *Runner) Client(key string) openai.Client { return r.snd.client(key) }

// Do sends c under the run's caps and records it as l. It returns the
// request's Sample, nil when the run stopped before c was sent, and the
// Retry-After of a shed answer (0: none).
func (r *Runner) Do(ctx context.Context, c Call, l Labels) (*Sample, time.Duration) {
	s, o := r.do(ctx, c, l)
	return s, o.retryAfter
}

// TenantKey is tenant i's API key.
func (r *Runner) TenantKey(i int) string {
	if i < len(r.cfg.TenantKeys) && r.cfg.TenantKeys[i] != "" {
		return r.cfg.TenantKeys[i]
	}
	return r.target.APIKey
}

// Until is a runner that sends as r does, on its clock, sender and caps,
// and records into r, but stops at t (or when r does, if sooner).
func (r *Runner) Until(t time.Time) *Runner {
	if !r.stopAt.IsZero() && r.stopAt.Before(t) {
		t = r.stopAt
	}
	return &Runner{cfg: r.cfg, target: r.target, snd: r.snd, pace: r.pace, slots: r.slots, prog: r.prog, start: r.start, stopAt: t, into: r}
}

// Stopped reports whether r sends no more: ctx is done or its stop time
// has come.
func (r *Runner) Stopped(ctx context.Context) bool {
	return ctx.Err() != nil || (!r.stopAt.IsZero() && !time.Now().Before(r.stopAt))
}

// Labels name a request in its Sample.
type Labels struct {
	Tenant, Session string
	Turn            int
	Kind            workload.TurnKind
}

// do sends c under the run's caps and records it. It returns nil when the
// run stopped before c was sent.
func (r *Runner) do(ctx context.Context, c Call, l Labels) (*Sample, outcome) {
	if r.Stopped(ctx) {
		return nil, outcome{}
	}
	if r.pace != nil {
		if err := r.pace.wait(ctx); err != nil {
			return nil, outcome{}
		}
	}
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			defer func() { <-r.slots }()
		case <-ctx.Done():
			return nil, outcome{}
		}
	}
	if r.Stopped(ctx) {
		return nil, outcome{}
	}
	o := r.snd.send(ctx, c)
	band := c.Priority
	if band == "" {
		band = workload.BandUnset
	}
	s := &Sample{
		Tenant: l.Tenant, Band: band, Session: l.Session, Turn: l.Turn, Kind: l.Kind, API: c.API,
		Start: o.start.Sub(r.start), TTFT: o.ttft, E2E: o.e2e,
		InputTokens: o.inputTokens, OutputTokens: o.outputTokens, CachedTokens: o.cachedTokens,
		Status: o.status, Streamed: o.streamed, Error: o.errClass, ErrorCode: o.errCode, DroppedReason: o.dropped,
		Shed:       o.errClass != "" && (o.status == 429 || (o.status == 503 && o.dropped != "")),
		ResponseID: o.responseID, PreviousResponseID: c.PreviousID,
		itl: o.itl,
	}
	r.Record(s)
	return s, o
}

// Record keeps s as one of the run's requests.
func (r *Runner) Record(s *Sample) {
	if r.into != nil {
		r.into.Record(s)
		return
	}
	r.mu.Lock()
	r.mu.samples = append(r.mu.samples, s)
	r.mu.Unlock()
	r.prog.add(s.Error != "" && !s.Cut())
	if r.emit != nil {
		r.emit(s)
	}
}

// maxRetryAfter bounds how long a session honours a shed's Retry-After.
const maxRetryAfter = 10 * time.Second

// Session runs one planned session: its turns one after another, each
// waiting for the previous to end and then for its own delay.
//
// On the Responses API a turn sends only its new items chained to the last
// successful response; on chat completions it sends the whole history. A
// failed turn's items are carried into the next turn, so the conversation
// the gateway sees stays whole.
func (r *Runner) Session(ctx context.Context, s workload.Session, tenant, key, priority string) {
	if !SleepUntil(ctx, r.start.Add(s.Start)) {
		return
	}
	api := s.API
	if api == "" {
		api = r.cfg.API
	}
	var prevID string
	var history, pending []workload.Item
	for i, t := range s.Turns {
		if i > 0 && !SleepUntil(ctx, time.Now().Add(t.Delay)) {
			return
		}
		pending = append(pending, t.Input...)
		c := Call{API: api, Key: key, Priority: priority, MaxTokens: t.MaxOutputTokens, Model: s.Model}
		if api == workload.APIChat {
			c.Session = s.ID
			c.Input = slices.Concat(history, pending)
		} else {
			c.PreviousID = prevID
			c.Input = pending
		}
		smp, o := r.do(ctx, c, Labels{Tenant: tenant, Session: s.ID, Turn: i, Kind: t.Kind})
		if smp == nil {
			return
		}
		if smp.Error != "" {
			// A shed turn is retried as clients do: after the
			// Retry-After the gateway gave (bounded), not at once.
			if smp.Shed && o.retryAfter > 0 && !SleepUntil(ctx, time.Now().Add(min(o.retryAfter, maxRetryAfter))) {
				return
			}
			continue
		}
		if api == workload.APIChat {
			history = append(slices.Concat(history, pending), workload.Item{Kind: workload.ItemMessage, Role: "assistant", Text: o.reply})
		} else {
			prevID = o.responseID
		}
		pending = nil
	}
}

// Replay sends trace requests at their times, open loop: a request is sent
// when due whether or not earlier ones have ended.
func (r *Runner) Replay(ctx context.Context, reqs []workload.TraceRequest) {
	var wg sync.WaitGroup
	for i, q := range reqs {
		if !SleepUntil(ctx, r.start.Add(q.At)) || r.Stopped(ctx) {
			break
		}
		wg.Go(func() {
			c := Call{
				API:       workload.APIChat,
				Key:       r.TenantKey(0),
				Priority:  r.cfg.Priority,
				Input:     []workload.Item{{Kind: workload.ItemMessage, Role: "user", Text: q.Prompt()}},
				MaxTokens: q.MaxOutputTokens,
			}
			r.do(ctx, c, Labels{Tenant: "trace", Turn: i, Kind: workload.TurnSingle})
		})
	}
	wg.Wait()
}

// BuildResult builds a Result from a run's samples.
func BuildResult(cfg workload.Config, start time.Time, wall time.Duration, samples []*Sample) *Result {
	res := &Result{
		Workload:        cfg.Workload,
		API:             cfg.API,
		Config:          cfg,
		Started:         start.UTC(),
		DurationSeconds: wall.Seconds(),
		Total:           Aggregate(samples, wall),
		ByTenant:        map[string]*Summary{},
		ByBand:          map[string]*Summary{},
		CDF:             buildCDF(samples),
		Timeline:        buildTimeline(samples, wall),
	}
	if cfg.Workload == workload.WorkloadTrace {
		res.API = workload.APIChat
	}
	for key, group := range GroupBy(samples, func(s *Sample) string { return s.Tenant }) {
		sum := Aggregate(group, wall)
		res.ByTenant[key] = &sum
	}
	for key, group := range GroupBy(samples, func(s *Sample) string { return s.Band }) {
		sum := Aggregate(group, wall)
		res.ByBand[key] = &sum
	}
	if cfg.KeepSamples {
		res.Samples = make([]Sample, len(samples))
		for i, s := range samples {
			res.Samples[i] = *s
		}
		slices.SortFunc(res.Samples, func(a, b Sample) int { return int(a.Start - b.Start) })
	}
	return res
}

// GroupBy splits samples by key.
func GroupBy(samples []*Sample, key func(*Sample) string) map[string][]*Sample {
	out := map[string][]*Sample{}
	for _, s := range samples {
		k := key(s)
		out[k] = append(out[k], s)
	}
	return out
}

// SleepUntil waits until t or ctx is done; it reports whether t came first.
func SleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pacer spaces request starts evenly: the global rate cap. Each caller
// reserves the next free slot and sleeps until it.
type pacer struct {
	interval time.Duration
	mu       struct {
		sync.Mutex
		next time.Time
	}
}

func (p *pacer) wait(ctx context.Context) error {
	p.mu.Lock()
	now := time.Now()
	at := p.mu.next
	if at.Before(now) {
		at = now
	}
	p.mu.next = at.Add(p.interval)
	p.mu.Unlock()
	if !SleepUntil(ctx, at) {
		return ctx.Err()
	}
	return nil
}

// RunLongPrompt replays the plan, killing a replica mid-run if asked.
func RunLongPrompt(ctx context.Context, cfg workload.Config, target Target, label string) (*Result, error) {
	lp := cfg.LongPrompt
	if lp.KillAt > 0 && target.Replicas == nil {
		return nil, fmt.Errorf("bench: long_prompt: kill_at needs the embedded fleet")
	}
	reqs := workload.PlanLongPrompt(cfg)
	res, _ := Measure(ctx, cfg, target, label, len(reqs), func(ctx context.Context, r *Runner) {
		if lp.KillAt > 0 {
			t := time.AfterFunc(lp.KillAt.D(), func() { target.Replicas.Kill(lp.KillReplica) })
			defer t.Stop()
		}
		r.Replay(ctx, reqs)
	})
	res.API = workload.APIChat
	return res, nil
}
