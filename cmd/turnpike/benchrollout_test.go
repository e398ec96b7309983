package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/embedded"
	"github.com/turnpike-gateway/turnpike/bench/scenario/rollout"
)

// TestBenchRollout runs a short rollout, with and without warm-ups: every
// replica is replaced by one of the new revision, no turn fails, sessions
// are handed over, and only the run with warm-ups sends any (issue 35's
// acceptance, in small; the TTFT goal is docs/operations.md's run).
func TestBenchRollout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two embedded fleets and replaces their replicas")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := benchCmd(ctx, []string{"--workload", "rollout", "--out", out, "--compare", "warm-up,no-warm-up",
		"--sim-replicas", "3", "--sim-time-scale", "0.05",
		"--sessions", "16", "--concurrency", "8", "--turns", "12",
		"--system-tokens", "200", "--tool-schema-tokens", "50", "--tool-result-tokens", "100", "--output-tokens", "16",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	for _, mode := range []string{embedded.RolloutWarmUp, embedded.RolloutNoWarmUp} {
		b, err := os.ReadFile(filepath.Join(out, "rollout-"+mode+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ Rollout rollout.Report }
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		rep := v.Rollout
		if len(rep.Replacements) != 3 {
			t.Fatalf("%s: %d replacements, want the 3 replicas':\n%s", mode, len(rep.Replacements), stdout.String())
		}
		for _, r := range rep.Replacements {
			if r.Error != "" {
				t.Errorf("%s: replacement step %d: %s", mode, r.Step, r.Error)
			}
		}
		if rep.Failed != 0 || rep.CrossRevisionLegs != 0 {
			t.Errorf("%s: %d turns failed, %v P/D legs across revisions", mode, rep.Failed, rep.CrossRevisionLegs)
		}
		if warm := rep.WarmUps["sent"]; mode == embedded.RolloutNoWarmUp && warm != 0 {
			t.Errorf("%s: %v warm-ups sent", mode, warm)
		}
	}
}
