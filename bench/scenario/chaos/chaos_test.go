package chaos

import (
	"reflect"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// EngineMetrics keys of the engines' token counters.
var (
	vllmPromptKey       = scrape.Key(enginemetrics.VLLMPromptTokens)
	vllmGenerationKey   = scrape.Key(enginemetrics.VLLMGenerationTokens)
	sglangGenerationKey = scrape.Key(enginemetrics.SGLangGenerationTokens)
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
		want     []Round
	}{
		{
			name: "defaults over 60s", replicas: 4, horizon: 60 * s,
			want: []Round{
				{5 * s, 8 * s, []int{0}}, {15 * s, 18 * s, []int{1}}, {25 * s, 28 * s, []int{2}},
				{35 * s, 38 * s, []int{3}}, {45 * s, 48 * s, []int{0}},
			},
		},
		{
			name: "two at once take replicas in turn", replicas: 3, horizon: 40 * s,
			edit: func(c *workload.ChaosConfig) { c.AtOnce = 2 },
			want: []Round{{5 * s, 8 * s, []int{0, 1}}, {15 * s, 18 * s, []int{2, 0}}, {25 * s, 28 * s, []int{1, 2}}},
		},
		{
			name: "rounds cap", replicas: 4, horizon: 60 * s,
			edit: func(c *workload.ChaosConfig) { c.Rounds = 2 },
			want: []Round{{5 * s, 8 * s, []int{0}}, {15 * s, 18 * s, []int{1}}},
		},
		{
			name: "a restart without a breaker timeout left is not planned", replicas: 2, horizon: 20 * s,
			want: []Round{{5 * s, 8 * s, []int{0}}},
		},
		{
			name: "no horizon goes on", replicas: 2, take: 3,
			edit: func(c *workload.ChaosConfig) {
				c.FirstKill, c.KillInterval, c.Downtime = 0, workload.Duration(2*s), workload.Duration(s)
			},
			want: []Round{{0, s, []int{0}}, {2 * s, 3 * s, []int{1}}, {4 * s, 5 * s, []int{0}}},
		},
		{name: "no replicas", replicas: 0, horizon: 60 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaults.Chaos
			if tt.edit != nil {
				tt.edit(&c)
			}
			var got []Round
			for rd := range Plan(c, tt.replicas, tt.horizon) {
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
	restarts := []*Restart{
		{Replica: 0, KilledAt: 5, RestartedAt: 8, Serving: true, ServingAfter: 2},
		{Replica: 1, KilledAt: 15, RestartedAt: 18, Serving: true, ServingAfter: 12},
		{Replica: 2, KilledAt: 25, Error: "sim: port taken"},
	}
	rep := reportOf(cfg.Chaos, samples, before, after, nil, restarts, 10*time.Second)

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
	wantGoals := []Goal{
		{Name: "failures before streaming", Want: "0", Got: "2"},
		{Name: "cut streams completed by migration", Want: ">= 99%", Got: "60.0% (3 of 5)"},
		{Name: "restarted replicas serving again", Want: "all within 10s", Got: "1 of 3"},
	}
	if !reflect.DeepEqual(rep.Goals, wantGoals) {
		t.Errorf("goals\n got %+v\nwant %+v", rep.Goals, wantGoals)
	}

	t.Run("all met", func(t *testing.T) {
		rep := reportOf(cfg.Chaos, samples[:3], before, scrape.GatewayCounters{Migrations: map[string]float64{"resumed": 2}}, nil, restarts[:1], time.Second)
		for _, g := range rep.Goals {
			if !g.Met {
				t.Errorf("goal %+v not met", g)
			}
		}
	})
	t.Run("nothing to test", func(t *testing.T) {
		rep := reportOf(cfg.Chaos, samples[:3], before, before, nil, nil, time.Second)
		if got := rep.Goals[1:]; got[0].Met || got[0].Got != "no stream was cut" || got[1].Met || got[1].Got != "no replica was killed" {
			t.Errorf("goals %+v: untested goals must not pass", got)
		}
	})
}
