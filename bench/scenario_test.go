package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/report"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// fakeReplicas stand for a fleet's engines: each serves a /metrics whose
// token counter is zero after a restart and counts as soon as it is
// scraped, except for the stuck replica, which never takes traffic again.
type fakeReplicas struct {
	srvs  []*httptest.Server
	stuck int
	mu    struct {
		sync.Mutex
		down   []bool
		tokens []int
		calls  []string
	}
}

func newFakeReplicas(t *testing.T, n, stuck int) *fakeReplicas {
	f := &fakeReplicas{stuck: stuck}
	f.mu.down = make([]bool, n)
	f.mu.tokens = make([]int, n)
	for i := range n {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.mu.down[i] {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			if i != f.stuck {
				f.mu.tokens[i] += 10
			}
			fmt.Fprintf(w, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total %d\n", f.mu.tokens[i])
		}))
		t.Cleanup(srv.Close)
		f.srvs = append(f.srvs, srv)
	}
	return f
}

func (f *fakeReplicas) urls() []string {
	var u []string
	for _, s := range f.srvs {
		u = append(u, s.URL+"/metrics")
	}
	return u
}

func (f *fakeReplicas) Kill(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.calls = append(f.mu.calls, fmt.Sprint("kill ", i))
	f.mu.down[i] = true
	return nil
}

func (f *fakeReplicas) Restart(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.calls = append(f.mu.calls, fmt.Sprint("restart ", i))
	f.mu.down[i], f.mu.tokens[i] = false, 0
	return nil
}

func (f *fakeReplicas) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.mu.calls)
}

// TestRunChaos runs the chaos workload against the fake gateway, which
// breaks every fifth stream after two deltas, and fake replicas, one of
// which never serves again after its restart.
func TestRunChaos(t *testing.T) {
	gw := newFakeGateway(t)
	gw.abortEvery = 5
	reps := newFakeReplicas(t, 3, 1)
	cfg := smallAgentic(workload.APIResponses)
	cfg.Workload = workload.WorkloadChaos
	cfg.Agentic.Sessions, cfg.Agentic.TurnsPerSession = 4, 10000
	cfg.MaxDuration = workload.Duration(600 * time.Millisecond)
	ms := func(n int) workload.Duration { return workload.Duration(time.Duration(n) * time.Millisecond) }
	cfg.Chaos = workload.ChaosConfig{FirstKill: ms(50), KillInterval: ms(200), Downtime: ms(50), AtOnce: 1, RejoinGoal: ms(150)}
	target := driver.Target{BaseURL: gw.srv.URL, APIKey: "k", EngineMetricsURLs: reps.urls(), Replicas: reps}
	res, err := Run(context.Background(), cfg, target)
	if err != nil {
		t.Fatal(err)
	}
	ch := res.Chaos
	if ch == nil {
		t.Fatal("no chaos report")
	}
	// Rounds at 50ms and 250ms fit in 600ms with 150ms to rejoin; a third
	// at 450ms would not.
	if got, want := reps.calls(), []string{"kill 0", "restart 0", "kill 1", "restart 1"}; !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
	if len(ch.Rounds) != 2 || len(ch.Restarts) != 2 {
		t.Fatalf("rounds %v, restarts %+v", ch.Rounds, ch.Restarts)
	}
	if r0, r1 := ch.Restarts[0], ch.Restarts[1]; !r0.Serving || r1.Serving || r0.Replica != 0 || r1.Replica != 1 {
		t.Errorf("restarts %+v: want replica 0 serving again, stuck replica 1 not", ch.Restarts)
	}
	if !(ch.Restarts[0].RestartedAt > ch.Restarts[0].KilledAt) {
		t.Errorf("restart %+v before its kill", ch.Restarts[0])
	}
	if ch.Requests != res.Total.Requests || ch.ByAPI[workload.APIChat] == nil || ch.ByAPI[workload.APIResponses] == nil {
		t.Errorf("requests %d of %d, by API %v", ch.Requests, res.Total.Requests, keys(ch.ByAPI))
	}
	var broken int
	for _, s := range res.Samples {
		if s.Streamed && s.Error == driver.ErrClassTransport {
			broken++
		}
	}
	if broken == 0 || ch.FailedMidStream["transport"] != broken || len(ch.FailedBeforeStream) != 0 {
		t.Errorf("mid-stream %v before %v; want %d broken streams, none before", ch.FailedMidStream, ch.FailedBeforeStream, broken)
	}
	if ch.StreamsStarted != ch.Requests || ch.StreamsCompleted != ch.Requests-broken {
		t.Errorf("streams started %d completed %d of %d requests", ch.StreamsStarted, ch.StreamsCompleted, ch.Requests)
	}
	// The fake counts one resumed migration and two retries per request.
	if int(ch.Migrations["resumed"]) != ch.Requests || int(ch.Retries) != 2*ch.Requests {
		t.Errorf("migrations %v retries %v for %d requests", ch.Migrations, ch.Retries, ch.Requests)
	}
	if ch.Goals[2].Met || ch.Goals[2].Got != "1 of 2" {
		t.Errorf("rejoin goal %+v: the stuck replica must fail it", ch.Goals[2])
	}

	var text, md, page bytes.Buffer
	if err := report.WriteText(&text, res); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	if err := report.WriteHTML(&page, res); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": text.String(), "markdown": md.String(), "html": page.String()} {
		for _, want := range []string{"chaos: goals", "failed mid-stream", "restarted replicas serving again", "gateway migrations"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s report lacks %q", name, want)
			}
		}
	}
}

func TestRunChaosNeedsReplicas(t *testing.T) {
	gw := newFakeGateway(t)
	cfg := workload.Config{Workload: workload.WorkloadChaos, Progress: io.Discard}
	if _, err := Run(context.Background(), cfg, gw.target()); err == nil || !strings.Contains(err.Error(), "Replicas") {
		t.Errorf("chaos without replicas: %v", err)
	}
	target := gw.target()
	target.Replicas = newFakeReplicas(t, 1, -1)
	if _, err := Run(context.Background(), cfg, target); err == nil || !strings.Contains(err.Error(), "at_once") {
		t.Errorf("chaos killing the whole fleet: %v", err)
	}
}

func TestRunLendingNeedsAPool(t *testing.T) {
	if _, err := Run(context.Background(), workload.Config{Workload: workload.WorkloadLending, Progress: io.Discard}, driver.Target{BaseURL: "http://127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "lendable pool") {
		t.Errorf("Run without a lendable pool: %v", err)
	}
}

// TestRunOverload runs the scenario against a gateway that sheds the
// background band with a Retry-After: the report counts each band's
// arrivals, completions and sheds, the sheds that carried Retry-After,
// and the interactive baseline.
func TestRunOverload(t *testing.T) {
	f := newFakeGateway(t)
	f.shedBand, f.shedRetryAfter = workload.BandBackground, "2"
	var cfg workload.Config
	cfg.Workload = workload.WorkloadOverload
	cfg.Progress = io.Discard
	cfg.Overload = workload.OverloadConfig{Duration: workload.Duration(time.Second), InteractiveRate: 10, StandardRate: 10, BackgroundRate: 20, PromptTokens: 64, OutputTokens: 4}
	cfg.EnsureDefaults()
	res, err := Run(context.Background(), cfg, f.target())
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Overload
	if rep == nil {
		t.Fatal("no overload report")
	}
	in, st, bg := rep.Bands[workload.BandInteractive], rep.Bands[workload.BandStandard], rep.Bands[workload.BandBackground]
	if in == nil || st == nil || bg == nil {
		t.Fatalf("bands %v, want all three", rep.Bands)
	}
	if in.Shed != 0 || in.Completed != in.Offered || in.Offered == 0 || st.Completed != st.Offered {
		t.Errorf("interactive %+v, standard %+v: want every arrival completed", in, st)
	}
	if bg.Offered == 0 || bg.Shed != bg.Offered || bg.ShedWithRetryAfter != bg.Offered || bg.Completed != 0 || bg.Reasons["saturated"] != bg.Offered {
		t.Errorf("background %+v: want every arrival shed as saturated, with Retry-After", bg)
	}
	if rep.BaselineInteractiveP99Ms <= 0 || rep.InteractiveP99Ratio <= 0 {
		t.Errorf("baseline p99 %g, ratio %g: want both measured", rep.BaselineInteractiveP99Ms, rep.InteractiveP99Ratio)
	}
	if want := float64(in.Offered+st.Offered+bg.Offered) / 1; rep.OfferedPerSecond != want {
		t.Errorf("offered %g/s, want %g", rep.OfferedPerSecond, want)
	}
	// The baseline sent interactive prompts alone, none of the overload
	// run's.
	var baseline int
	for _, r := range f.requests() {
		if r.Priority == workload.BandInteractive {
			baseline++
		}
	}
	if baseline <= in.Offered {
		t.Errorf("%d interactive requests in all, want the baseline's beside the run's %d", baseline, in.Offered)
	}
	var out bytes.Buffer
	if err := report.WriteText(&out, res); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "overload:") || !strings.Contains(s, "Retry-After") {
		t.Errorf("text report lacks the overload lines:\n%s", s)
	}
}
