package isolation

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// TestBurstSessionHasNoGaps: B's loops keep a request in flight all the
// time, so BurstMultiple × FleetSlots loops offer that many requests.
func TestBurstSessionHasNoGaps(t *testing.T) {
	var cfg workload.Config
	cfg.Workload = workload.WorkloadIsolation
	cfg.EnsureDefaults()
	if cfg.Agentic.LoopGap == 0 {
		t.Fatal("the default loop gap is zero; the test proves nothing")
	}
	for round := range 3 {
		s := burstSession(cfg, 0, 7, round)
		if len(s.Turns) != cfg.Agentic.TurnsPerSession {
			t.Fatalf("round %d: %d turns, want %d", round, len(s.Turns), cfg.Agentic.TurnsPerSession)
		}
		for i, turn := range s.Turns {
			if turn.Delay != 0 {
				t.Errorf("round %d turn %d: delay %v, want none", round, i, turn.Delay)
			}
			if i > 0 && turn.Kind != workload.TurnTool {
				t.Errorf("round %d turn %d: kind %v, want a tool turn", round, i, turn.Kind)
			}
		}
	}
	if a, b := burstSession(cfg, 0, 1, 0), burstSession(cfg, 0, 2, 0); a.ID == b.ID {
		t.Errorf("loops 1 and 2 planned the same session %s", a.ID)
	}
	if a, b := burstSession(cfg, 0, 1, 0), burstSession(cfg, 1, 1, 0); a.ID == b.ID {
		t.Errorf("bursts 0 and 1 planned the same session %s for loop 1", a.ID)
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
			var samples []*driver.Sample
			for _, d := range tc.e2e {
				samples = append(samples, &driver.Sample{E2E: d})
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
	l.add([]scrape.EngineMetrics{
		{"vllm:num_requests_running": 3, "vllm:num_requests_waiting": 0, "vllm:kv_cache_usage_perc": 0.2},
		nil, // a failed scrape is left out
		{"vllm:num_requests_running": 5, "vllm:num_requests_waiting": 2, "vllm:kv_cache_usage_perc": 0.4},
	})
	l.add([]scrape.EngineMetrics{
		{"sglang:num_running_reqs": 1, "sglang:num_queue_reqs": 0, "sglang:token_usage": 0.1},
	})
	l.add([]scrape.EngineMetrics{nil}) // no engine answered: no sample
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
	var running atomic.Int64
	third := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := running.Add(1)
		if n == 3 {
			close(third)
		}
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %d\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n", n)
	}))
	defer srv.Close()

	var none *FleetLoad
	always := func() bool { return true }
	sampleFleet(context.Background(), nil, always, &none)()
	if none != nil {
		t.Fatalf("no engines: %+v, want nil", none)
	}

	// The sampler scrapes one at a time: when the third scrape reaches the
	// engine, the first two have been added.
	var l *FleetLoad
	stop := sampleFleet(context.Background(), []string{srv.URL}, always, &l)
	await(t, third, "third scrape")
	stop()
	if l == nil || l.Samples < 2 || l.MaxWaiting != 1 || l.MaxRunning < 2 {
		t.Fatalf("sampled %+v, want at least 2 samples, waiting 1, running rising", l)
	}

	// Outside its stretches the sampler does not scrape: not at its start,
	// nor at its next tick.
	var never *FleetLoad
	asked := make(chan struct{}, 2)
	outside := func() bool {
		select {
		case asked <- struct{}{}:
		default:
		}
		return false
	}
	scraped := running.Load()
	stop = sampleFleet(context.Background(), []string{srv.URL}, outside, &never)
	await(t, asked, "first turn of the sampler")
	await(t, asked, "second turn of the sampler")
	stop()
	if n := running.Load(); never != nil || n != scraped {
		t.Errorf("sampled %+v and scraped %d times outside its stretches", never, n-scraped)
	}
}

// await fails t unless ch yields within 10s.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s in 10s", what)
	}
}

// The plan splits Duration into Rounds stretches of each condition, with
// a settling pause of Settle of a stretch.
func TestIsolationPlan(t *testing.T) {
	ic := workload.IsolationConfig{Duration: workload.Duration(90 * time.Second), Rounds: 3, Settle: 0.2}
	if p := scheduleOf(ic); p.rounds != 3 || p.stretch != 30*time.Second || p.settle != 6*time.Second {
		t.Errorf("plan %+v, want 3 rounds of 30s stretches, settling 6s", p)
	}
	if one := scheduleOf(workload.IsolationConfig{Duration: workload.Duration(10 * time.Second)}); one.rounds != 1 || one.stretch != 10*time.Second || one.settle != 0 {
		t.Errorf("one round without settling: %+v", one)
	}
}

// Each burst's batch is summed into the run's report.
func TestMergeBatchReports(t *testing.T) {
	got := mergeBatchReports([]*driver.BatchLoadReport{
		{ID: "b1", Status: "completed", Lines: 4, Completed: 4, Seconds: 2, InDeadline: true, RunSeconds: 30},
		nil,
		{ID: "b2", Status: "in_progress", Lines: 4, Completed: 3, Failed: 1, Seconds: 5, RunSeconds: 30, Error: "late"},
	})
	want := driver.BatchLoadReport{ID: "b1,b2", Status: "in_progress", Lines: 8, Completed: 7, Failed: 1, Seconds: 5, RunSeconds: 30, Error: "late"}
	if *got != want {
		t.Errorf("merged %+v, want %+v", *got, want)
	}
}
