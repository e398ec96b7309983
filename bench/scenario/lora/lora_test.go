package lora

import (
	"testing"

	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// TestPlanZipf: every session asks for an adapter, the more popular ones
// more often (Zipf), the same on every plan of a seed.
func TestPlanZipf(t *testing.T) {
	var cfg workload.Config
	cfg.Workload = workload.WorkloadLoRA
	cfg.Agentic.Sessions = 2000
	cfg.LoRA = workload.LoRAConfig{Adapters: 8, Zipf: 1}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	plan := Plan(cfg)
	count := map[string]int{}
	for _, s := range plan {
		count[s.Model]++
	}
	if len(count) != 8 {
		t.Fatalf("%d adapters asked for, want 8: %v", len(count), count)
	}
	// Weights 1, 1/2, …, 1/8 over H(8) ≈ 2.718: adapter 0 about 736 of
	// 2000, adapter 7 about 92.
	if n := count[workload.AdapterName(0)]; n < 650 || n > 820 {
		t.Errorf("adapter 0: %d sessions, want about 736", n)
	}
	if n := count[workload.AdapterName(7)]; n < 55 || n > 135 {
		t.Errorf("adapter 7: %d sessions, want about 92", n)
	}
	for i, s := range Plan(cfg) {
		if s.Model != plan[i].Model {
			t.Fatal("the plan is not deterministic")
		}
	}
}
