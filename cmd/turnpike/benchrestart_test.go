package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/scenario/restart"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// TestBenchGatewayRestart runs a short gateway-restart workload: two
// gateways on one Redis behind the bench's front, each restarted once
// under agentic sessions on chat and the Responses API. No request fails,
// every acknowledged response reads back, and every chain holds (issue
// 35's acceptance, in small).
func TestBenchGatewayRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an embedded fleet and two gateways, restarted")
	}
	if _, err := exec.LookPath(redistest.Binary); err != nil && os.Getenv("TURNPIKE_REDIS_SERVER") == "" {
		t.Skip(redistest.SkipMessage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := benchCmd(ctx, []string{"--workload", "gateway-restart", "--out", out,
		"--restart-rounds", "1", "--restart-warmup", "1s", "--restart-gap", "200ms",
		"--sim-replicas", "2", "--sim-time-scale", "0.05",
		"--sessions", "16", "--concurrency", "8", "--turns", "12",
		"--system-tokens", "200", "--tool-schema-tokens", "50", "--tool-result-tokens", "100", "--output-tokens", "16",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "gateway-restart.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep restart.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Restarts) != 2 {
		t.Fatalf("%d restarts, want each of 2 gateways once:\n%s", len(rep.Restarts), stdout.String())
	}
	for _, r := range rep.Restarts {
		if r.Error != "" {
			t.Errorf("restart of gateway %d: %s", r.Gateway, r.Error)
		}
	}
	if rep.Failed != 0 || rep.Lost != 0 || rep.Broken != 0 || rep.Acknowledged == 0 || rep.Chains == 0 {
		t.Fatalf("%d of %d requests failed %v; %d of %d acknowledged responses lost; %d of %d chains broken",
			rep.Failed, rep.Requests, rep.ByClass, rep.Lost, rep.Acknowledged, rep.Broken, rep.Chains)
	}
}
