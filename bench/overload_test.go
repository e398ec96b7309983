package bench

import (
	"bytes"
	"context"
	"io"
	"strings"
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
	plan := planOverload(cfg, overloadIDs)
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
	again := planOverload(cfg, overloadIDs)
	if len(again) != len(plan) || again[len(plan)-1].at != plan[len(plan)-1].at {
		t.Error("the plan is not deterministic")
	}
	if other := planOverload(cfg, overloadBaselineIDs); other[0].req.HashIDs[0] == plan[0].req.HashIDs[0] {
		t.Error("the baseline's prompts share blocks with the overload run's")
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
	if err := WriteText(&out, res); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "overload:") || !strings.Contains(s, "Retry-After") {
		t.Errorf("text report lacks the overload lines:\n%s", s)
	}
}
