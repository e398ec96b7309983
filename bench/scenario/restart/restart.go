package restart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Defaults of Options.
const (
	DefaultRounds = 2
	DefaultWarmup = 10 * time.Second
	DefaultGap    = 3 * time.Second
)

// Gateways are the gateways behind the front, restarted one at a time.
type Gateways interface {
	// Len is the number of gateways.
	Len() int
	// Restart stops gateway i as SIGTERM does (readiness fails, it serves
	// on for its shutdown delay, then drains and stops) and starts it
	// again on its address; it returns once the new one serves.
	Restart(ctx context.Context, i int) error
}

// Options schedule the restarts.
type Options struct {
	// Rounds is how many times each gateway is restarted, in turn.
	// Default 2.
	Rounds int
	// Warmup is the load before the first restart; Gap the load between
	// one restart's end and the next one's start. Defaults 10s and 3s.
	Warmup, Gap time.Duration
}

// EnsureDefaults fills the zero fields.
func (o *Options) EnsureDefaults() {
	if o.Rounds <= 0 {
		o.Rounds = DefaultRounds
	}
	if o.Warmup <= 0 {
		o.Warmup = DefaultWarmup
	}
	if o.Gap <= 0 {
		o.Gap = DefaultGap
	}
}

// Report is what the rolling restart did to the clients.
type Report struct {
	Gateways int `json:"gateways"`
	// Restarts are the restarts, in order.
	Restarts []Restart `json:"restarts"`
	// Requests is every turn sent; Failed those that failed, by class
	// and code ("http_502", "stream").
	Requests int            `json:"requests"`
	Failed   int            `json:"failed"`
	ByClass  map[string]int `json:"failed_by_class,omitempty"`
	// Acknowledged are the Responses turns answered whole; Lost those of
	// them that GET /v1/responses/{id} does not return completed
	// afterwards (LostIDs names the first ten).
	Acknowledged int      `json:"acknowledged"`
	Lost         int      `json:"lost"`
	LostIDs      []string `json:"lost_ids,omitempty"`
	// Chains are the Responses turns answered that chained to an earlier
	// one (previous_response_id); Broken those whose previous response
	// was not acknowledged or is lost.
	Chains int `json:"chains"`
	Broken int `json:"chains_broken"`
	// FrontRetries counts the requests the front sent to another gateway
	// after one refused or dropped them.
	FrontRetries int64 `json:"front_retries"`
	// Phases are TTFT before the first restart, during the restarts,
	// and after the last.
	Phases []Phase `json:"phases"`
	// Goals are the rolling restart's goals, each against what the run got.
	Goals []Goal `json:"goals"`
}

// Restart is one gateway's restart, times from the run's start.
type Restart struct {
	Gateway int     `json:"gateway"`
	Round   int     `json:"round"`
	Began   float64 `json:"began_seconds"`
	Serving float64 `json:"serving_seconds"`
	Error   string  `json:"error,omitempty"`
}

// Phase is the TTFT of the turns answered that were sent in one phase.
type Phase struct {
	Name     string  `json:"name"`
	Requests int     `json:"requests"`
	TTFTP50  float64 `json:"ttft_p50_ms"`
	TTFTP90  float64 `json:"ttft_p90_ms"`
}

// Goal is one goal: what was wanted, what the run got.
type Goal struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

// Run runs the agentic sessions, alternately on chat completions and the
// Responses API, through target (the front) while gws are restarted one
// at a time, o.Rounds times each, passes of the sessions following one
// another until every restart has been made and a request answered after
// the last; then it reads back every acknowledged response through the
// front. front counts its retries; nil counts none.
func Run(ctx context.Context, cfg workload.Config, target driver.Target, label string, gws Gateways, front *Front, o Options) (*driver.Result, *Report, error) {
	o.EnsureDefaults()
	if gws == nil || gws.Len() < 2 {
		return nil, nil, errors.New("bench: gateway-restart needs two gateways or more")
	}
	// plan is a pass of the sessions, each pass of its own seed.
	plan := func(pass int) []workload.Session {
		c := cfg
		c.Seed += int64(pass)
		sessions := workload.PlanAgentic(c)
		for i := range sessions {
			sessions[i].API = workload.APIResponses
			if i%2 == 0 {
				sessions[i].API = workload.APIChat
			}
		}
		return sessions
	}
	first := plan(0)
	var restarts []Restart
	res, samples := driver.Measure(ctx, cfg, target, label, len(first)*cfg.Agentic.TurnsPerSession, func(ctx context.Context, dr *driver.Runner) {
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan struct{})
		var mark int // requests recorded when the last restart's gap ended
		go func() {
			defer close(done)
			restarts = schedule(sctx, dr.Started(), gws, o)
			mark = dr.Recorded()
		}()
		// The restarts are made under load however fast the fleet is: a
		// pass of the sessions that ends before they have, and before a
		// request was answered after them, is followed by another.
		for pass, sessions := 0, first; ; pass++ {
			if pass > 0 {
				sessions = plan(pass)
			}
			dr.Sessions(ctx, sessions)
			if ctx.Err() != nil || dr.Stopped(ctx) {
				stop()
				<-done
				return
			}
			select {
			case <-done:
				if dr.Recorded() > mark {
					return
				}
			default:
			}
		}
	})
	res.API = workload.APIChat + "+" + workload.APIResponses
	rep := &Report{Gateways: gws.Len(), Restarts: restarts}
	if front != nil {
		rep.FrontRetries = front.Retries()
	}
	rep.count(samples)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	rep.readBack(rctx, target, samples)
	rep.phases(samples, restarts)
	rep.goals(o)
	return res, rep, nil
}

// schedule restarts each gateway in turn, o.Rounds times, after o.Warmup
// and o.Gap apart, until ctx ends.
func schedule(ctx context.Context, start time.Time, gws Gateways, o Options) []Restart {
	var out []Restart
	at := func() float64 { return time.Since(start).Seconds() }
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !wait(o.Warmup) {
		return out
	}
	for round := range o.Rounds {
		for i := range gws.Len() {
			r := Restart{Gateway: i, Round: round + 1, Began: at()}
			if err := gws.Restart(ctx, i); err != nil {
				r.Error = err.Error()
			}
			r.Serving = at()
			out = append(out, r)
			if !wait(o.Gap) {
				return out
			}
		}
	}
	return out
}

// count tallies the requests and their failures.
func (rep *Report) count(samples []*driver.Sample) {
	rep.ByClass = map[string]int{}
	for _, s := range samples {
		rep.Requests++
		if s.Error == "" {
			continue
		}
		rep.Failed++
		k := s.Error
		if s.ErrorCode != "" {
			k += " " + s.ErrorCode
		}
		rep.ByClass[k]++
	}
}

// readBack reads every acknowledged response through the front, and
// checks each chain's link to its previous response.
func (rep *Report) readBack(ctx context.Context, target driver.Target, samples []*driver.Sample) {
	acked := map[string]bool{}
	for _, s := range samples {
		if s.Error == "" && s.API == workload.APIResponses && s.ResponseID != "" {
			acked[s.ResponseID] = true
		}
	}
	ids := make([]string, 0, len(acked))
	for id := range acked {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rep.Acknowledged = len(ids)
	base := strings.TrimSuffix(strings.TrimRight(target.BaseURL, "/"), "/v1") + "/v1/responses/"
	lost := make([]bool, len(ids))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				lost[i] = !completed(ctx, base+ids[i], target.APIKey)
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	gone := map[string]bool{}
	for i, l := range lost {
		if l {
			rep.Lost++
			gone[ids[i]] = true
			if len(rep.LostIDs) < 10 {
				rep.LostIDs = append(rep.LostIDs, ids[i])
			}
		}
	}
	for _, s := range samples {
		if s.Error != "" || s.API != workload.APIResponses || s.PreviousResponseID == "" {
			continue
		}
		rep.Chains++
		if !acked[s.PreviousResponseID] || gone[s.PreviousResponseID] {
			rep.Broken++
		}
	}
}

// completed reports whether GET url answers a completed response.
func completed(ctx context.Context, url, key string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && (strings.Contains(string(b), `"status":"completed"`) || strings.Contains(string(b), `"status":"incomplete"`))
}

// phases splits the answered turns' TTFT by when they were sent: before
// the first restart began, while restarts ran, after the last one served.
func (rep *Report) phases(samples []*driver.Sample, restarts []Restart) {
	first, last := time.Duration(1<<62), time.Duration(1<<62)
	if len(restarts) > 0 {
		first = time.Duration(restarts[0].Began * float64(time.Second))
		last = time.Duration(restarts[len(restarts)-1].Serving * float64(time.Second))
	}
	ttft := map[string][]float64{}
	for _, s := range samples {
		if s.Error != "" || s.TTFT == 0 {
			continue
		}
		p := "during"
		switch {
		case s.Start < first:
			p = "before"
		case s.Start > last:
			p = "after"
		}
		ttft[p] = append(ttft[p], float64(s.TTFT)/float64(time.Millisecond))
	}
	for _, name := range []string{"before", "during", "after"} {
		v := ttft[name]
		slices.Sort(v)
		ph := Phase{Name: name, Requests: len(v)}
		if len(v) > 0 {
			ph.TTFTP50, ph.TTFTP90 = driver.Percentile(v, 50), driver.Percentile(v, 90)
		}
		rep.Phases = append(rep.Phases, ph)
	}
}

// goals checks the run against the rolling restart's goals: every restart
// made and serving again, no failed request, no acknowledged response lost,
// no chain broken, and turns answered in each phase.
func (rep *Report) goals(o Options) {
	restarted, failedRestarts := len(rep.Restarts), 0
	for _, r := range rep.Restarts {
		if r.Error != "" {
			failedRestarts++
		}
	}
	wantRestarts := rep.Gateways * o.Rounds
	rep.Goals = []Goal{
		{Name: "restarts", Want: fmt.Sprintf("%d (each of %d gateways %d times), all serving again", wantRestarts, rep.Gateways, o.Rounds),
			Got: fmt.Sprintf("%d, %d failed", restarted, failedRestarts), Met: restarted == wantRestarts && failedRestarts == 0},
		{Name: "failed requests", Want: "0", Got: fmt.Sprint(rep.Failed), Met: rep.Failed == 0},
		{Name: "acknowledged responses lost", Want: "0", Got: fmt.Sprintf("%d of %d", rep.Lost, rep.Acknowledged), Met: rep.Lost == 0 && rep.Acknowledged > 0},
		{Name: "previous_response_id chains intact", Want: "all", Got: fmt.Sprintf("%d of %d broken", rep.Broken, rep.Chains), Met: rep.Broken == 0 && rep.Chains > 0},
	}
	for _, p := range rep.Phases {
		if p.Requests == 0 {
			rep.Goals = append(rep.Goals, Goal{Name: "load " + p.Name + " the restarts", Want: "turns answered", Got: "none (more --sessions or --turns)", Met: false})
		}
	}
}

// Text writes the report as a few lines for a terminal.
func (rep *Report) Text(w io.Writer) {
	fmt.Fprintf(w, "gateway restart: %d gateways, %d restarts; %d requests, %d failed; %d acknowledged responses, %d lost; %d chained turns, %d broken; front retries %d\n",
		rep.Gateways, len(rep.Restarts), rep.Requests, rep.Failed, rep.Acknowledged, rep.Lost, rep.Chains, rep.Broken, rep.FrontRetries)
	for k, n := range rep.ByClass {
		fmt.Fprintf(w, "  failed %s: %d\n", k, n)
	}
	for _, r := range rep.Restarts {
		fmt.Fprintf(w, "  restart gateway %d (round %d): %.1fs → serving %.1fs %s\n", r.Gateway, r.Round, r.Began, r.Serving, r.Error)
	}
	for _, p := range rep.Phases {
		fmt.Fprintf(w, "  TTFT %-6s %5d turns  p50 %7.1f ms  p90 %7.1f ms\n", p.Name, p.Requests, p.TTFTP50, p.TTFTP90)
	}
	for _, g := range rep.Goals {
		mark := "MET"
		if !g.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "  goal %-36s want %s, got %s: %s\n", g.Name, g.Want, g.Got, mark)
	}
}
