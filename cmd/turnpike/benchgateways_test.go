package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// TestBenchTwoGateways runs a short agentic comparison of one gateway
// and two behind the round-robin front on one fleet and one Redis: both
// runs serve every request, and the two gateways' engines reuse
// prefixes. Latency goals are figures of turnpike bench, not assertions.
func TestBenchTwoGateways(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an embedded fleet and two gateways")
	}
	if _, err := exec.LookPath(redistest.Binary); err != nil && os.Getenv("TURNPIKE_REDIS_SERVER") == "" {
		t.Skip(redistest.SkipMessage)
	}
	var cmp bench.Comparison
	runBench(t, &cmp,
		"--workload", "agentic", "--compare", "cache-aware@1gw,cache-aware@2gw",
		"--sim-replicas", "2", "--sim-time-scale", "0.05",
		"--sessions", "4", "--concurrency", "4", "--turns", "4",
		"--system-tokens", "200", "--tool-schema-tokens", "50", "--tool-result-tokens", "100", "--output-tokens", "16",
	)
	if len(cmp.Results) != 2 {
		t.Fatalf("%d results", len(cmp.Results))
	}
	for _, r := range cmp.Results {
		if r.Total.Requests != 16 || r.Total.Errors != 0 {
			t.Errorf("%s: %d requests, %d errors: %+v", r.Policy, r.Total.Requests, r.Total.Errors, r.Total.ErrorsByClass)
		}
		if r.Total.CachedTokenShare <= 0 {
			t.Errorf("%s: no prefix reuse", r.Policy)
		}
	}
}

func TestBenchGatewaysWithoutRedis(t *testing.T) {
	t.Setenv("TURNPIKE_REDIS_SERVER", "turnpike-no-such-redis-server")
	var stdout, stderr bytes.Buffer
	err := benchCmd(t.Context(), []string{"--workload", "agentic", "--gateways", "2", "--out", t.TempDir(),
		"--sim-replicas", "1", "--sessions", "1", "--turns", "1"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), redistest.SkipMessage) {
		t.Fatalf("without redis-server: %v, want a message saying how to install it", err)
	}
}
