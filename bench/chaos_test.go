package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

func TestPlanChaos(t *testing.T) {
	var defaults workload.Config
	defaults.EnsureDefaults()
	s := time.Second
	tests := []struct {
		name     string
		edit     func(*workload.ChaosConfig)
		replicas int
		horizon  time.Duration
		take     int // stop after this many rounds; 0: all
		want     []ChaosRound
	}{
		{
			name: "defaults over 60s", replicas: 4, horizon: 60 * s,
			want: []ChaosRound{
				{5 * s, 8 * s, []int{0}}, {15 * s, 18 * s, []int{1}}, {25 * s, 28 * s, []int{2}},
				{35 * s, 38 * s, []int{3}}, {45 * s, 48 * s, []int{0}},
			},
		},
		{
			name: "two at once take replicas in turn", replicas: 3, horizon: 40 * s,
			edit: func(c *workload.ChaosConfig) { c.AtOnce = 2 },
			want: []ChaosRound{{5 * s, 8 * s, []int{0, 1}}, {15 * s, 18 * s, []int{2, 0}}, {25 * s, 28 * s, []int{1, 2}}},
		},
		{
			name: "rounds cap", replicas: 4, horizon: 60 * s,
			edit: func(c *workload.ChaosConfig) { c.Rounds = 2 },
			want: []ChaosRound{{5 * s, 8 * s, []int{0}}, {15 * s, 18 * s, []int{1}}},
		},
		{
			name: "a restart without a breaker timeout left is not planned", replicas: 2, horizon: 20 * s,
			want: []ChaosRound{{5 * s, 8 * s, []int{0}}},
		},
		{
			name: "no horizon goes on", replicas: 2, take: 3,
			edit: func(c *workload.ChaosConfig) {
				c.FirstKill, c.KillInterval, c.Downtime = 0, workload.Duration(2*s), workload.Duration(s)
			},
			want: []ChaosRound{{0, s, []int{0}}, {2 * s, 3 * s, []int{1}}, {4 * s, 5 * s, []int{0}}},
		},
		{name: "no replicas", replicas: 0, horizon: 60 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaults.Chaos
			if tt.edit != nil {
				tt.edit(&c)
			}
			var got []ChaosRound
			for rd := range PlanChaos(c, tt.replicas, tt.horizon) {
				got = append(got, rd)
				if len(got) == tt.take {
					break
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rounds\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestServing(t *testing.T) {
	tests := []struct {
		name string
		m    scrape.EngineMetrics
		pre  float64
		want bool
	}{
		{"fresh, idle", scrape.EngineMetrics{vllmPromptKey: 0}, 500, false},
		{"fresh, counted", scrape.EngineMetrics{vllmPromptKey: 40, vllmGenerationKey: 2}, 500, true},
		{"fresh, running", scrape.EngineMetrics{"vllm:num_requests_running": 1}, 500, true},
		{"kept its counters, idle", scrape.EngineMetrics{vllmPromptKey: 500}, 500, false},
		{"kept its counters, counted", scrape.EngineMetrics{vllmPromptKey: 510}, 500, true},
		{"never served before", scrape.EngineMetrics{}, 0, false},
		{"sglang", scrape.EngineMetrics{sglangGenerationKey: 3}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serving(tt.m, tt.pre); got != tt.want {
				t.Errorf("serving(%v, %v) = %v", tt.m, tt.pre, got)
			}
		})
	}
}

func TestChaosReport(t *testing.T) {
	var cfg workload.Config
	cfg.EnsureDefaults()
	ok := func(api string) *driver.Sample { return &driver.Sample{API: api, Streamed: true, Status: 200} }
	samples := []*driver.Sample{
		ok(workload.APIChat), ok(workload.APIResponses), ok(workload.APIResponses),
		{API: workload.APIChat, Status: 503, Error: "http_503", ErrorCode: "no-endpoints"},
		{API: workload.APIResponses, Error: driver.ErrClassTransport},
		{API: workload.APIChat, Streamed: true, Status: 200, Error: driver.ErrClassStream},
		{API: workload.APIResponses, Streamed: true, Status: 200, Error: driver.ErrClassTransport},
	}
	before := scrape.GatewayCounters{Migrations: map[string]float64{"resumed": 1, "failed": 0}, Retries: 2}
	after := scrape.GatewayCounters{Migrations: map[string]float64{"resumed": 4, "failed": 1, "not_resumable": 0}, Retries: 5}
	restarts := []*ChaosRestart{
		{Replica: 0, KilledAt: 5, RestartedAt: 8, Serving: true, ServingAfter: 2},
		{Replica: 1, KilledAt: 15, RestartedAt: 18, Serving: true, ServingAfter: 12},
		{Replica: 2, KilledAt: 25, Error: "sim: port taken"},
	}
	rep := chaosReport(cfg.Chaos, samples, before, after, nil, restarts, 10*time.Second)

	if rep.Requests != 7 || rep.ByAPI[workload.APIChat].Requests != 3 || rep.ByAPI[workload.APIResponses].Errors != 2 {
		t.Errorf("requests %d, by API %+v", rep.Requests, rep.ByAPI)
	}
	if want := map[string]int{"http_503 no-endpoints": 1, "transport": 1}; !reflect.DeepEqual(rep.FailedBeforeStream, want) {
		t.Errorf("before stream %v, want %v", rep.FailedBeforeStream, want)
	}
	if want := map[string]int{"error_event": 1, "transport": 1}; !reflect.DeepEqual(rep.FailedMidStream, want) {
		t.Errorf("mid-stream %v, want %v", rep.FailedMidStream, want)
	}
	if rep.StreamsStarted != 5 || rep.StreamsCompleted != 3 {
		t.Errorf("streams started/completed %d/%d, want 5/3", rep.StreamsStarted, rep.StreamsCompleted)
	}
	if want := map[string]float64{"resumed": 3, "failed": 1, "not_resumable": 0}; !reflect.DeepEqual(rep.Migrations, want) || rep.Retries != 3 {
		t.Errorf("migrations %v retries %v", rep.Migrations, rep.Retries)
	}
	// Cut: three resumed, two seen failing mid-stream.
	if rep.CutStreams != 5 || rep.CutCompleted != 0.6 {
		t.Errorf("cut %d, completed %v; want 5, 0.6", rep.CutStreams, rep.CutCompleted)
	}
	wantGoals := []ChaosGoal{
		{Name: "failures before streaming", Want: "0", Got: "2"},
		{Name: "cut streams completed by migration", Want: ">= 99%", Got: "60.0% (3 of 5)"},
		{Name: "restarted replicas serving again", Want: "all within 10s", Got: "1 of 3"},
	}
	if !reflect.DeepEqual(rep.Goals, wantGoals) {
		t.Errorf("goals\n got %+v\nwant %+v", rep.Goals, wantGoals)
	}

	t.Run("all met", func(t *testing.T) {
		rep := chaosReport(cfg.Chaos, samples[:3], before, scrape.GatewayCounters{Migrations: map[string]float64{"resumed": 2}}, nil, restarts[:1], time.Second)
		for _, g := range rep.Goals {
			if !g.Met {
				t.Errorf("goal %+v not met", g)
			}
		}
	})
	t.Run("nothing to test", func(t *testing.T) {
		rep := chaosReport(cfg.Chaos, samples[:3], before, before, nil, nil, time.Second)
		if got := rep.Goals[1:]; got[0].Met || got[0].Got != "no stream was cut" || got[1].Met || got[1].Got != "no replica was killed" {
			t.Errorf("goals %+v: untested goals must not pass", got)
		}
	})
}

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
	if err := WriteText(&text, res); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(&page, res); err != nil {
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
