package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestBurstSessionHasNoGaps: B's loops keep a request in flight all the
// time, so BurstMultiple × FleetSlots loops offer that many requests.
func TestBurstSessionHasNoGaps(t *testing.T) {
	var cfg Config
	cfg.Workload = WorkloadIsolation
	cfg.EnsureDefaults()
	if cfg.Agentic.LoopGap == 0 {
		t.Fatal("the default loop gap is zero; the test proves nothing")
	}
	for round := range 3 {
		s := burstSession(cfg, 7, round)
		if len(s.Turns) != cfg.Agentic.TurnsPerSession {
			t.Fatalf("round %d: %d turns, want %d", round, len(s.Turns), cfg.Agentic.TurnsPerSession)
		}
		for i, turn := range s.Turns {
			if turn.Delay != 0 {
				t.Errorf("round %d turn %d: delay %v, want none", round, i, turn.Delay)
			}
			if i > 0 && turn.Kind != TurnTool {
				t.Errorf("round %d turn %d: kind %v, want a tool turn", round, i, turn.Kind)
			}
		}
	}
	if a, b := burstSession(cfg, 1, 0), burstSession(cfg, 2, 0); a.ID == b.ID {
		t.Errorf("loops 1 and 2 planned the same session %s", a.ID)
	}
}

func TestMeanInFlight(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name string
		e2e  []time.Duration
		wall time.Duration
		want float64
	}{
		{"none", nil, time.Second, 0},
		{"one busy all the time", []time.Duration{ms(1000)}, time.Second, 1},
		// A loop that waits 300ms between 100ms turns sends 2.5 a second and
		// is in flight a quarter of the time: 80 such loops offer 20
		// requests, not 80.
		{"loops with gaps", repeat(ms(100), 80*5/2), time.Second, 20},
		{"no window", []time.Duration{ms(5)}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var samples []*Sample
			for _, d := range tc.e2e {
				samples = append(samples, &Sample{E2E: d})
			}
			if got := meanInFlight(samples, tc.wall); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("meanInFlight = %g, want %g", got, tc.want)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestFleetLoadAdd(t *testing.T) {
	var l FleetLoad
	l.add([]EngineMetrics{
		{"vllm:num_requests_running": 3, "vllm:num_requests_waiting": 0, "vllm:kv_cache_usage_perc": 0.2},
		nil, // a failed scrape is left out
		{"vllm:num_requests_running": 5, "vllm:num_requests_waiting": 2, "vllm:kv_cache_usage_perc": 0.4},
	})
	l.add([]EngineMetrics{
		{"sglang:num_running_reqs": 1, "sglang:num_queue_reqs": 0, "sglang:token_usage": 0.1},
	})
	l.add([]EngineMetrics{nil}) // no engine answered: no sample
	want := FleetLoad{Samples: 2, MeanRunning: 4.5, MaxRunning: 8, MeanWaiting: 1, MaxWaiting: 2, MaxKVUsage: 0.3}
	if math.Abs(l.MaxKVUsage-want.MaxKVUsage) > 1e-9 {
		t.Fatalf("max KV usage %g, want %g", l.MaxKVUsage, want.MaxKVUsage)
	}
	l.MaxKVUsage = want.MaxKVUsage
	if l != want {
		t.Fatalf("FleetLoad = %+v, want %+v", l, want)
	}
}

func TestSampleFleet(t *testing.T) {
	running := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		running++
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %d\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n", running)
	}))
	defer srv.Close()

	var none *FleetLoad
	sampleFleet(context.Background(), nil, time.Now(), &none)()
	if none != nil {
		t.Fatalf("no engines: %+v, want nil", none)
	}

	var l *FleetLoad
	stop := sampleFleet(context.Background(), []string{srv.URL}, time.Now(), &l)
	time.Sleep(fleetSampleInterval + fleetSampleInterval/2)
	stop()
	if l == nil || l.Samples < 2 || l.MaxWaiting != 1 || l.MaxRunning < 2 {
		t.Fatalf("sampled %+v, want at least 2 samples, waiting 1, running rising", l)
	}
}
