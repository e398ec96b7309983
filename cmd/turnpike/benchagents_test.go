package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench"
)

// The agents workload compared across policies at a tiny size: every
// phase of each run has turns, all answered, a TTFT floor, the share of
// the ideal reuse captured and the process's CPU split, and the console
// report sets the policies' phases side by side.
func TestBenchAgentsCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded fleets and gateways")
	}
	var cmp bench.Comparison
	stdout, _ := runBench(t, &cmp,
		"--workload", "agents", "--compare", "round-robin,cache-aware",
		"--phases", "1,2", "--phase-duration", "20s", "--engines-apart=false",
		"--sim-replicas", "2", "--sim-time-scale", "0.05",
	)
	if len(cmp.Results) != 2 {
		t.Fatalf("%d results, want 2", len(cmp.Results))
	}
	for _, r := range cmp.Results {
		rep := r.Agents
		if rep == nil || len(rep.Phases) != 2 {
			t.Fatalf("%s: agents report %+v, want 2 phases", r.Policy, rep)
		}
		// Answers still streaming a quarter phase after the run's end
		// are cut (canceled), counted apart in the phases and in the
		// run's total, not as errors: nothing may fail.
		cut := 0
		for _, p := range rep.Phases {
			cut += p.Cut
		}
		if r.Total.Errors != 0 || r.Total.Cut != cut {
			t.Errorf("%s: %d errors (%v), %d cut, want none and the phases' %d cut", r.Policy, r.Total.Errors, r.Total.ErrorsByClass, r.Total.Cut, cut)
		}
		for k, p := range rep.Phases {
			if p.Agents != k+1 || p.Answered == 0 || p.TTFTP50Ms <= 0 || p.FloorP50Ms <= 0 || p.OutputTokensPerSec <= 0 {
				t.Errorf("%s phase %d: %+v", r.Policy, k+1, p)
			}
			if rep.CPUError == "" && p.CPU.Gateway+p.CPU.Client+p.CPU.Engines <= 0 {
				t.Errorf("%s phase %d: no CPU profiled: %+v", r.Policy, k+1, p.CPU)
			}
		}
		if last := rep.Phases[1]; r.Policy == "cache-aware" && (last.IdealTokens == 0 || last.Captured < 0.5) {
			t.Errorf("cache-aware captured %.2f of the ideal reuse (%d tokens), want most of it", last.Captured, last.IdealTokens)
		}
	}
	if !strings.Contains(stdout, "agents, phase by phase") || !strings.Contains(stdout, "cache-aware against round-robin, phase 2 (2 agents)") {
		t.Errorf("console report lacks the agents' phases side by side:\n%s", stdout)
	}
}

// --gateway-config is the embedded gateway's config: a body limit below
// the agents' prompts refuses every turn (413, counted as another
// failure), which the defaults would have served; a file with pools of
// its own, or an unknown key, stops the bench before it starts.
func TestBenchGatewayConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded fleet and gateway")
	}
	dir := t.TempDir()
	write := func(name, yaml string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var res bench.Result
	runBench(t, &res, "--workload", "agents", "--phases", "1", "--phase-duration", "10s",
		"--engines-apart=false", "--agents-process=false", "--sim-replicas", "1", "--sim-time-scale", "0.05",
		"--gateway-config", write("small.yaml", "bodyLimit: 1024\n"))
	p := res.Agents.Phases[0]
	if p.Turns == 0 || p.Answered != 0 || p.ErrOther != p.Turns {
		t.Errorf("with bodyLimit 1024: %d turns, %d answered, %d other failures; want every turn refused", p.Turns, p.Answered, p.ErrOther)
	}
	for name, yaml := range map[string]string{
		"pools.yaml":   "pools:\n- name: x\n  model: m\n  endpoints:\n  - url: http://127.0.0.1:1\n",
		"unknown.yaml": "bodyLimitt: 1024\n",
		"lending.yaml": "bodyLimit: 1024\n",
	} {
		out := t.TempDir()
		workload := "agents"
		if name == "lending.yaml" {
			workload = "lending" // starts gateways of its own
		}
		err := benchCmd(t.Context(), []string{"--workload", workload, "--gateway-config", write(name, yaml), "--out", out}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--gateway-config") {
			t.Errorf("%s: %v, want the bench stopped for its config", name, err)
		}
	}
}
