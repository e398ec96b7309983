package overload

import (
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// TestPlanOverload: each band arrives at its rate within the duration, in
// time order, every prompt made of blocks no other prompt has; a negative
// rate sends none of a band.
func TestPlanOverload(t *testing.T) {
	var cfg workload.Config
	cfg.Workload = workload.WorkloadOverload
	cfg.Overload = workload.OverloadConfig{Duration: workload.Duration(200 * time.Second), InteractiveRate: 1, StandardRate: 2, BackgroundRate: -1, PromptTokens: 1000}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	plan := planArrivals(cfg, overloadIDs)
	count := map[string]int{}
	seen := map[int64]bool{}
	for i, a := range plan {
		count[a.band]++
		if i > 0 && a.at < plan[i-1].at {
			t.Fatalf("arrival %d at %v before %v", i, a.at, plan[i-1].at)
		}
		if a.at >= cfg.Overload.Duration.D() {
			t.Fatalf("arrival %d at %v, past the duration", i, a.at)
		}
		if want := (1000 + workload.BlockTokens - 1) / workload.BlockTokens; len(a.req.HashIDs) != want || a.req.InputTokens != 1000 {
			t.Fatalf("arrival %d: %d blocks for %d tokens, want %d for 1000", i, len(a.req.HashIDs), a.req.InputTokens, want)
		}
		for _, id := range a.req.HashIDs {
			if seen[id] {
				t.Fatalf("block %d in two prompts", id)
			}
			seen[id] = true
		}
	}
	// Poisson counts over 200 s: 200 ± 3σ and 400 ± 3σ.
	if n := count[workload.BandInteractive]; n < 158 || n > 242 {
		t.Errorf("%d interactive arrivals, want about 200", n)
	}
	if n := count[workload.BandStandard]; n < 340 || n > 460 {
		t.Errorf("%d standard arrivals, want about 400", n)
	}
	if n := count[workload.BandBackground]; n != 0 {
		t.Errorf("%d background arrivals at a negative rate", n)
	}
	again := planArrivals(cfg, overloadIDs)
	if len(again) != len(plan) || again[len(plan)-1].at != plan[len(plan)-1].at {
		t.Error("the plan is not deterministic")
	}
	if other := planArrivals(cfg, overloadBaselineIDs); other[0].req.HashIDs[0] == plan[0].req.HashIDs[0] {
		t.Error("the baseline's prompts share blocks with the overload run's")
	}
}
