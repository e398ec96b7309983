package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench"
)

// TestBenchChaos runs a short chaos workload on the embedded stack: two
// rounds kill and restart a replica of two while agent sessions stream,
// and the results carry the chaos report. Goals are figures here, not
// assertions: they depend on the machine's load.
func TestBenchChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded fleet and gateway")
	}
	var res bench.Result
	stdout, _ := runBench(t, &res,
		"--workload", "chaos",
		"--sim-replicas", "2", "--sim-time-scale", "0.05",
		"--sessions", "4", "--concurrency", "4", "--turns", "100",
		"--system-tokens", "100", "--tool-schema-tokens", "50", "--tool-result-tokens", "50", "--output-tokens", "48",
		"--max-duration", "4s",
		"--chaos-first-kill", "500ms", "--chaos-interval", "2s", "--chaos-downtime", "300ms", "--chaos-rejoin-goal", "1s",
	)
	ch := res.Chaos
	if ch == nil {
		t.Fatalf("no chaos report in %+v", res)
	}
	// Rounds at 0.5s and 2.5s leave a rejoin goal before 4s; one at 4.5s
	// would not.
	if len(ch.Rounds) != 2 || len(ch.Restarts) != 2 {
		t.Fatalf("rounds %+v restarts %+v", ch.Rounds, ch.Restarts)
	}
	for _, rs := range ch.Restarts {
		if rs.Error != "" {
			t.Errorf("replica %d: %s", rs.Replica, rs.Error)
		}
	}
	if ch.Requests == 0 || ch.ByAPI[bench.APIChat] == nil || ch.ByAPI[bench.APIResponses] == nil {
		t.Errorf("requests %d by API %v", ch.Requests, ch.ByAPI)
	}
	if _, ok := ch.Migrations["resumed"]; !ok {
		t.Errorf("no migration counter read from the gateway: %v (%v)", ch.Migrations, ch.GatewayErrors)
	}
	if !strings.Contains(stdout, "chaos: goals") {
		t.Errorf("console report lacks the goals:\n%s", stdout)
	}
	t.Logf("%s", stdout)
}

func TestBenchChaosNeedsTheEmbeddedFleet(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := benchCmd(context.Background(), []string{"--workload", "chaos", "--url", "http://127.0.0.1:1", "--out", t.TempDir()}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "embedded") {
		t.Errorf("chaos against --url: %v", err)
	}
}

// --repeat repeats a comparison: it needs two policies or more to set
// against each other.
func TestBenchRepeatNeedsACompare(t *testing.T) {
	for _, args := range [][]string{
		{"--repeat", "3"},
		{"--repeat", "2", "--compare", "cache-aware"},
		{"--repeat", "0", "--compare", "round-robin,cache-aware"},
	} {
		var stdout, stderr bytes.Buffer
		err := benchCmd(context.Background(), append(args, "--out", t.TempDir()), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--repeat") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// A batch beside an agentic run goes through the embedded gateway's Batch
// API and is reported apart from the run's turns.
func TestBenchBatchBesideTheRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded fleet and gateway")
	}
	var res bench.Result
	stdout, _ := runBench(t, &res,
		"--sim-replicas", "1", "--sim-time-scale", "0.05",
		"--sessions", "2", "--concurrency", "2", "--turns", "2",
		"--system-tokens", "100", "--tool-schema-tokens", "50", "--tool-result-tokens", "50", "--output-tokens", "16",
		"--batch-lines", "6", "--batch-prompt-tokens", "64", "--batch-output-tokens", "4",
	)
	bl := res.BatchLoad
	if bl == nil || bl.ID == "" || bl.Lines != 6 || bl.Completed != 6 || bl.Failed != 0 || !bl.InDeadline || bl.Status != "completed" {
		t.Fatalf("batch report %+v", bl)
	}
	if res.Total.Requests != 4 {
		t.Errorf("the run counted %d requests, want its own 4 turns only", res.Total.Requests)
	}
	if !strings.Contains(stdout, "6 completed, 0 failed") {
		t.Errorf("console report lacks the batch:\n%s", stdout)
	}
}

// runBench runs turnpike bench with args and an --out of its own, within
// two minutes, reads its results.json into v and returns what it printed.
func runBench(t *testing.T, v any, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := t.TempDir()
	var outb, errb bytes.Buffer
	if err := benchCmd(ctx, append(args, "--out", out), &outb, &errb); err != nil {
		t.Fatalf("bench: %v\n%s", err, errb.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
	return outb.String(), errb.String()
}

// The isolation scenario compared across policies: each stack has the two
// tenants, and every run sends their keys, so no turn of either policy is
// refused for its key.
func TestBenchIsolationCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded fleets and gateways")
	}
	var cmp bench.Comparison
	_, stderr := runBench(t, &cmp,
		"--workload", "isolation", "--compare", "round-robin,cache-aware",
		// Three rounds of 0.5 s stretches, with A's turns 0.1 s apart so
		// that each stretch holds several.
		"--isolation-duration", "1.5s", "--isolation-a-rate", "10", "--sim-replicas", "2", "--sim-time-scale", "0.05",
		"--batch-lines", "3", "--batch-deadline", "1m",
	)
	if len(cmp.Results) != 2 {
		t.Fatalf("%d results, want 2", len(cmp.Results))
	}
	// Each stack stops its KV subscriptions before its engines.
	if strings.Contains(stderr, "subscription interrupted") {
		t.Errorf("a KV subscription saw its engine stop first:\n%s", stderr)
	}
	for _, r := range cmp.Results {
		iso := r.Isolation
		if iso == nil || iso.Baseline == nil {
			t.Fatalf("%s: no isolation report", r.Policy)
		}
		// B's loops may be shed (429); no request is refused its key, and
		// none of A's interactive turns fails.
		for name, s := range map[string]bench.Summary{"baseline": iso.Baseline.Total, "burst": r.Total} {
			if s.Requests == 0 || s.ErrorsByClass["http_401"] != 0 {
				t.Errorf("%s %s: %d requests, errors %v", r.Policy, name, s.Requests, s.ErrorsByClass)
			}
		}
		if a := iso.BurstA; a.Requests == 0 || a.Errors != 0 {
			t.Errorf("%s: tenant A under the burst: %d requests, errors %v", r.Policy, a.Requests, a.ErrorsByClass)
		}
		// The batch's client (a tenant's process, by default) submitted one
		// as each of the run's bursts started, with its tenant's key, and
		// followed each to its end.
		rounds := bench.DefaultIsolationRounds
		if b := r.BatchLoad; b == nil || b.Error != "" || b.Lines != 3*rounds || b.Completed != 3*rounds || !b.InDeadline || b.RunSeconds <= 0 ||
			strings.Count(b.ID, ",") != rounds-1 {
			t.Errorf("%s: batch %+v", r.Policy, b)
		}
	}
}
