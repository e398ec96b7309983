package main

import (
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench"
)

// The lora workload compared across policies: the embedded engines serve
// the adapters (round-robin's turns load them where they land), every
// turn is answered, and each run reports its adapter loads.
func TestBenchLoRACompare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded fleets and gateways")
	}
	var cmp bench.Comparison
	stdout, _ := runBench(t, &cmp,
		"--workload", "lora", "--compare", "round-robin,cache-aware",
		"--sim-replicas", "2", "--sim-time-scale", "0.02", "--lora-adapters", "6", "--lora-slots", "2",
		"--sessions", "6", "--concurrency", "6", "--turns", "3",
		"--system-tokens", "100", "--tool-schema-tokens", "50", "--tool-result-tokens", "50", "--output-tokens", "16",
	)
	if len(cmp.Results) != 2 {
		t.Fatalf("%d results, want 2", len(cmp.Results))
	}
	for _, r := range cmp.Results {
		l := r.LoRA
		if l == nil {
			t.Fatalf("%s: no lora report", r.Policy)
		}
		if r.Total.Errors != 0 || l.Requests != 18 || l.Loads < 1 || len(l.ScrapeErrors) > 0 {
			t.Errorf("%s: %d errors; lora %+v", r.Policy, r.Total.Errors, *l)
		}
	}
	if !strings.Contains(stdout, "against round-robin: adapter loads per 1,000 requests") {
		t.Errorf("console report lacks the lora comparison:\n%s", stdout)
	}
}
