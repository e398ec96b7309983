package lending

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// The lending workload models an RL trainer that owns a lendable pool and
// uses its engines in cycles: busy for TrainerDuty of every TrainerCycle,
// idle for the rest. While the trainer is busy it sends its own load
// straight to the pool's engines (long streamed completions, TrainerStreams
// at once per engine, cut when the busy phase ends), so the engines report
// running sequences exactly while it works; that is the simulator's stand-in
// for a training step holding the accelerators. Meanwhile AsyncJobs
// background responses are kept in flight through the gateway, closed
// loop, on a fleet with a pool of its own beside the lendable one.
//
// The workload runs twice on the same fleet: first the trainer alone (the
// pool idles between busy phases), then with lending: at each idle phase's
// start the pool is lent through the admin API for the idle phase, and
// ReclaimDeadline before the next busy phase it is reclaimed with that
// deadline. The pool's duty cycle is the fraction of time its engines had
// a running sequence, sampled from their /metrics every lendingSample;
// each reclaim is checked by polling the engines until none runs one.

// lendingSample is how often the pool's engines are scraped for the duty
// cycle; reclaimPoll how often after a reclaim.
const (
	lendingSample = 100 * time.Millisecond
	reclaimPoll   = 20 * time.Millisecond
)

// Report is the lending workload's verdict: the pool's duty cycle
// and the background work done, for the trainer alone and with lending.
type Report struct {
	Pool                   string  `json:"pool"`
	Engines                int     `json:"engines"`
	TrainerDuty            float64 `json:"trainer_duty"`
	CycleSeconds           float64 `json:"cycle_seconds"`
	Cycles                 int     `json:"cycles"`
	ReclaimDeadlineSeconds float64 `json:"reclaim_deadline_seconds"`
	AsyncJobs              int     `json:"async_jobs"`
	// Alone is the run with the trainer alone; Lent the run that lends
	// its idle phases.
	Alone Figures `json:"alone"`
	Lent  Figures `json:"lent"`
	// Alone's whole Result (Lent's is the one this report hangs on).
	AloneResult *driver.Result `json:"alone_result,omitempty"`
}

// Figures are one run's figures.
type Figures struct {
	Lending bool `json:"lending"`
	// DutyCycle is the share of time, over the pool's engines, in which
	// an engine had a running sequence (from readings of its /metrics,
	// each weighing the time since the one before); TrainerShare the part
	// of it in the trainer's busy phases, LentShare in its idle phases.
	DutyCycle    float64 `json:"duty_cycle"`
	TrainerShare float64 `json:"trainer_share"`
	LentShare    float64 `json:"lent_share"`
	Samples      int     `json:"samples"`
	// The background responses: completed, failed (by error), and still
	// running at the end (cancelled then); completed output tokens.
	AsyncCompleted    int            `json:"async_completed"`
	AsyncFailed       int            `json:"async_failed"`
	AsyncUnfinished   int            `json:"async_unfinished"`
	AsyncOutputTokens int            `json:"async_output_tokens"`
	AsyncErrors       map[string]int `json:"async_errors,omitempty"`
	// Reclaims are the run's reclaims, one per lent idle phase.
	Reclaims []ReclaimCheck `json:"reclaims,omitempty"`
	// CancelledByReclaim is how many lent requests the gateway cut at a
	// reclaim's deadline in the run (and moved to another endpoint or
	// failed), from the admin API's pool view.
	CancelledByReclaim int64 `json:"cancelled_by_reclaim"`
	// AdminErrors are lend and reclaim calls that failed.
	AdminErrors []string `json:"admin_errors,omitempty"`
}

// ReclaimCheck is one reclaim and whether it freed the pool in time.
type ReclaimCheck struct {
	Cycle int `json:"cycle"`
	// AtSeconds is when the reclaim was sent, from the run's start.
	AtSeconds       float64 `json:"at_seconds"`
	DeadlineSeconds float64 `json:"deadline_seconds"`
	// InFlight is the lent requests the gateway had on the pool when it
	// answered the reclaim.
	InFlight int `json:"in_flight"`
	// FreedAfterSeconds is how long after the reclaim no engine of the
	// pool ran a sequence; negative when that was not seen before the
	// trainer's next busy phase.
	FreedAfterSeconds float64 `json:"freed_after_seconds"`
	WithinDeadline    bool    `json:"within_deadline"`
}

// Run runs the workload alone and with lending, and returns the
// second run's Result with the report.
func Run(ctx context.Context, cfg workload.Config, target driver.Target, label string) (*driver.Result, *Report, error) {
	lt := target.Lending
	if lt == nil || lt.Pool == "" || len(lt.EngineURLs) == 0 {
		return nil, nil, errors.New("bench: the lending workload needs a lendable pool (Target.Lending): run it on the embedded fleet")
	}
	lc := cfg.Lending
	rep := &Report{
		Pool: lt.Pool, Engines: len(lt.EngineURLs), TrainerDuty: lc.TrainerDuty, CycleSeconds: lc.TrainerCycle.D().Seconds(),
		Cycles: lc.Cycles, ReclaimDeadlineSeconds: lc.ReclaimDeadline.D().Seconds(), AsyncJobs: lc.AsyncJobs,
	}
	phase := cfg
	phase.MaxDuration = workload.Duration(time.Duration(lc.Cycles) * lc.TrainerCycle.D())
	var res [2]*driver.Result
	for i, lend := range []bool{false, true} {
		name := label + " trainer alone"
		if lend {
			name = label + " lending"
		}
		run := Figures{Lending: lend}
		before := cancelledByReclaim(ctx, target)
		res[i], _ = driver.Measure(ctx, phase, target, name, 0, func(ctx context.Context, dr *driver.Runner) {
			r := runner{dr}
			r.lending(ctx, &run, lend)
		})
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("bench: lending: %w", err)
		}
		run.CancelledByReclaim = cancelledByReclaim(ctx, target) - before
		if lend {
			rep.Lent = run
		} else {
			rep.Alone = run
			waitIdle(ctx, lt.FleetMetricsURLs, time.Minute)
		}
	}
	rep.AloneResult = res[0]
	return res[1], rep, nil
}

// lending drives one run: the trainer's cycles, the duty-cycle sampler
// and the background jobs, until the last cycle ends.
func (r runner) lending(ctx context.Context, run *Figures, lend bool) {
	lc, lt := r.Config().Lending, r.Target().Lending
	end := r.Started().Add(time.Duration(lc.Cycles) * lc.TrainerCycle.D())
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	busy := func(at time.Time) bool {
		in := at.Sub(r.Started()) % lc.TrainerCycle.D()
		return in < time.Duration(float64(lc.TrainerCycle)*lc.TrainerDuty)
	}
	cl := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	var mu sync.Mutex // guards run
	wg.Go(func() {
		d := sampleDuty(ctx, cl, lt.EngineURLs, busy)
		mu.Lock()
		run.DutyCycle, run.TrainerShare, run.LentShare, run.Samples = d.duty, d.trainer, d.lent, d.samples
		mu.Unlock()
	})
	wg.Go(func() { r.trainer(ctx, cl, run, &mu, lend) })
	jobs := newJobBook()
	for range lc.AsyncJobs {
		wg.Go(func() { r.asyncJobs(ctx, jobs) })
	}
	wg.Wait()
	// What still runs is cancelled, so the next run starts on an idle fleet.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer ccancel()
	cl2 := r.Client(r.Target().APIKey)
	for _, id := range jobs.open() {
		cl2.Responses.Cancel(cctx, id)
	}
	run.AsyncCompleted, run.AsyncFailed, run.AsyncOutputTokens, run.AsyncErrors = jobs.completed, jobs.failed, jobs.tokens, jobs.errors
	run.AsyncUnfinished = len(jobs.open())
}

// trainer runs the busy phases and, when lend is set, lends the idle ones.
func (r runner) trainer(ctx context.Context, cl *http.Client, run *Figures, mu *sync.Mutex, lend bool) {
	lc := r.Config().Lending
	cycle := lc.TrainerCycle.D()
	busyFor := time.Duration(float64(cycle) * lc.TrainerDuty)
	deadline := lc.ReclaimDeadline.D()
	for i := range lc.Cycles {
		start := r.Started().Add(time.Duration(i) * cycle)
		if !driver.SleepUntil(ctx, start) {
			return
		}
		bctx, cancel := context.WithDeadline(ctx, start.Add(busyFor))
		r.trainerLoad(bctx)
		cancel()
		if !lend {
			continue
		}
		idleEnd := start.Add(cycle)
		if _, err := r.admin(ctx, cl, "lend", fmt.Sprintf(`{"duration":%q,"reclaimDeadline":%q}`, time.Until(idleEnd).Round(time.Millisecond).String(), deadline.String())); err != nil {
			mu.Lock()
			run.AdminErrors = append(run.AdminErrors, err.Error())
			mu.Unlock()
			continue
		}
		if !driver.SleepUntil(ctx, idleEnd.Add(-deadline)) {
			return
		}
		at := time.Now()
		inFlight, err := r.admin(ctx, cl, "reclaim", fmt.Sprintf(`{"deadline":%q}`, deadline.String()))
		if err != nil {
			mu.Lock()
			run.AdminErrors = append(run.AdminErrors, err.Error())
			mu.Unlock()
			continue
		}
		check := ReclaimCheck{Cycle: i, AtSeconds: at.Sub(r.Started()).Seconds(), DeadlineSeconds: deadline.Seconds(), InFlight: inFlight, FreedAfterSeconds: -1}
		// Watched past the run's end for the last cycle, and at most a
		// deadline past the idle phase: a pool still busy then was not
		// freed in time.
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*deadline+time.Second)
		freed, ok := waitFreed(wctx, cl, r.Target().Lending.EngineURLs, idleEnd.Add(deadline))
		wcancel()
		if ok {
			check.FreedAfterSeconds = freed.Sub(at).Seconds()
			check.WithinDeadline = freed.Sub(at) <= deadline
		}
		mu.Lock()
		run.Reclaims = append(run.Reclaims, check)
		mu.Unlock()
	}
}

// trainerLoad keeps TrainerStreams completions running on every engine
// of the pool until ctx ends.
func (r runner) trainerLoad(ctx context.Context) {
	cfg := r.Config()
	lc := cfg.Lending
	body, _ := json.Marshal(map[string]any{
		"model": cfg.Model, "stream": true, "max_tokens": lc.TrainerOutputTokens, "ignore_eos": true,
		"messages": []map[string]string{{"role": "user", "content": "trainer rollout"}},
	})
	var wg sync.WaitGroup
	for _, u := range r.Target().Lending.EngineURLs {
		for range lc.TrainerStreams {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(u, "/")+"/v1/chat/completions", bytes.NewReader(body))
					if err != nil {
						return
					}
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						if !driver.SleepUntil(ctx, time.Now().Add(50*time.Millisecond)) {
							return
						}
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
}

// admin POSTs body to the lendable pool's lend or reclaim route and
// returns the lent requests in flight the answer reports.
func (r runner) admin(ctx context.Context, cl *http.Client, action, body string) (int, error) {
	lt := r.Target().Lending
	root := strings.TrimSuffix(strings.TrimRight(r.Target().BaseURL, "/"), "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, root+"/admin/v1/pools/"+lt.Pool+"/"+action, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+lt.AdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", action, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %d %s", action, resp.StatusCode, bytes.TrimSpace(b))
	}
	var out struct {
		Lending struct {
			InFlight int `json:"inFlight"`
		} `json:"lending"`
	}
	err = json.Unmarshal(b, &out)
	return out.Lending.InFlight, err
}

// cancelledByReclaim reads the lendable pool's count of lent requests cut
// at a deadline from the admin API; 0 when unreadable.
func cancelledByReclaim(ctx context.Context, target driver.Target) int64 {
	lt := target.Lending
	root := strings.TrimSuffix(strings.TrimRight(target.BaseURL, "/"), "/v1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, root+"/admin/v1/pools/"+lt.Pool, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+lt.AdminToken)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var out struct {
		Lending struct {
			CancelledByReclaim int64 `json:"cancelledByReclaim"`
		} `json:"lending"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	return out.Lending.CancelledByReclaim
}

// running is the engines' running sequences, each -1 when unreadable.
func running(ctx context.Context, cl *http.Client, engines []string) []int {
	out := make([]int, len(engines))
	var wg sync.WaitGroup
	for i, u := range engines {
		wg.Go(func() {
			out[i] = -1
			m, err := scrape.One(ctx, cl, strings.TrimRight(u, "/")+"/metrics")
			if err != nil {
				return
			}
			if v, ok := m.Running(); ok {
				out[i] = int(v)
			}
		})
	}
	wg.Wait()
	return out
}

// waitFreed polls the engines until none runs a sequence, up to until.
func waitFreed(ctx context.Context, cl *http.Client, engines []string, until time.Time) (time.Time, bool) {
	for time.Now().Before(until) {
		at := time.Now()
		if rs := running(ctx, cl, engines); !slices.ContainsFunc(rs, func(n int) bool { return n != 0 }) {
			return at, true
		}
		if !driver.SleepUntil(ctx, at.Add(reclaimPoll)) {
			break
		}
	}
	return time.Time{}, false
}

// waitIdle waits up to limit for every engine to run nothing.
func waitIdle(ctx context.Context, metricsURLs []string, limit time.Duration) {
	cl := &http.Client{Timeout: 10 * time.Second}
	engines := make([]string, len(metricsURLs))
	for i, u := range metricsURLs {
		engines[i] = strings.TrimSuffix(u, "/metrics")
	}
	waitFreed(ctx, cl, engines, time.Now().Add(limit))
}

type duty struct {
	duty, trainer, lent float64
	samples             int
}

// sampleDuty samples the engines every lendingSample until ctx ends. Each
// reading weighs the time since the one before, so that rounds slowed by
// a busy machine do not tilt the figure.
func sampleDuty(ctx context.Context, cl *http.Client, engines []string, busy func(time.Time) bool) duty {
	var d duty
	var total, inBusy, inIdle time.Duration
	prev := time.Now()
	for ctx.Err() == nil {
		at := time.Now()
		rs := running(ctx, cl, engines)
		if ctx.Err() != nil {
			break
		}
		w := at.Sub(prev)
		prev = at
		for _, n := range rs {
			if n < 0 {
				continue
			}
			d.samples++
			total += w
			if n > 0 {
				if busy(at) {
					inBusy += w
				} else {
					inIdle += w
				}
			}
		}
		driver.SleepUntil(ctx, at.Add(lendingSample))
	}
	if total > 0 {
		d.trainer, d.lent = float64(inBusy)/float64(total), float64(inIdle)/float64(total)
		d.duty = d.trainer + d.lent
	}
	return d
}

// jobBook keeps the background responses' outcomes.
type jobBook struct {
	mu                        sync.Mutex
	running                   map[string]bool
	completed, failed, tokens int
	errors                    map[string]int
}

func newJobBook() *jobBook { return &jobBook{running: map[string]bool{}, errors: map[string]int{}} }

func (b *jobBook) open() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.running))
	for id := range b.running {
		out = append(out, id)
	}
	return out
}

// asyncJobs runs background responses one after another until ctx ends,
// each streamed from its creation to its end.
func (r runner) asyncJobs(ctx context.Context, book *jobBook) {
	cfg := r.Config()
	lc := cfg.Lending
	cl := r.Client(r.Target().APIKey)
	for n := 0; ctx.Err() == nil; n++ {
		params := responses.ResponseNewParams{
			Model:           cfg.Model,
			Background:      openai.Bool(true),
			MaxOutputTokens: openai.Int(int64(lc.AsyncOutputTokens)),
			Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("Summarise evaluation transcript %d.", n))},
		}
		start := time.Now()
		stream := cl.Responses.NewStreaming(ctx, params)
		id, done, failure, tokens := "", false, "", 0
		var ttft time.Duration
		for stream.Next() {
			ev := stream.Current()
			switch ev.Type {
			case "response.created":
				id = ev.Response.ID
				book.mu.Lock()
				book.running[id] = true
				book.mu.Unlock()
			case "response.output_text.delta":
				if ttft == 0 {
					ttft = time.Since(start)
				}
			case "response.completed", "response.incomplete":
				done, tokens = true, int(ev.Response.Usage.OutputTokens)
			case "response.failed":
				failure = "failed: " + ev.Response.Error.Message
			case "error":
				failure = "error: " + ev.Message
			}
		}
		err := stream.Err()
		stream.Close()
		if ctx.Err() != nil && !done {
			return // still running: cancelled after the run
		}
		sample := &driver.Sample{Tenant: "async", Band: workload.BandBackground, API: workload.APIResponses, Start: start.Sub(r.Started()), TTFT: ttft,
			E2E: time.Since(start), OutputTokens: tokens, Status: http.StatusOK, Streamed: id != "", ResponseID: id}
		book.mu.Lock()
		delete(book.running, id)
		switch {
		case done:
			book.completed++
			book.tokens += tokens
		default:
			if failure == "" && err != nil {
				failure = err.Error()
			}
			if failure == "" {
				failure = "stream ended without a result"
			}
			book.failed++
			book.errors[failure]++
			sample.Error = driver.ErrClassStream
		}
		book.mu.Unlock()
		r.Record(sample)
		if !done {
			driver.SleepUntil(ctx, time.Now().Add(100*time.Millisecond))
		}
	}
}

// runner is the driver's runner with the scenario's own ways of sending.
type runner struct{ *driver.Runner }
