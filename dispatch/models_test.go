package dispatch

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/models"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestModelFallbackNoEndpoint (issue 36): a rule's target whose pool has
// no endpoint (its discovery found none) is passed over for the target's
// fallback, before anything is sent: the turn is served by the fallback
// and says so, and the fallback is counted.
func TestModelFallbackNoEndpoint(t *testing.T) {
	e := newSimEngine(t, sim.Config{})
	empty := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(empty, []byte("endpoints: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{
		{Name: "big", ServedModels: []string{"big-model"}, Discovery: &pools.DiscoveryConfig{Kind: pools.DiscoveryFile, Path: empty}},
		{Name: "p", ServedModels: []string{testModel}, Endpoints: []pools.EndpointConfig{{URL: e.URL}}},
	}, pools.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
	table, err := models.New(models.Config{Rules: []models.RuleConfig{{Name: "agents", Match: models.Match{Model: "gpt-4.1"},
		Targets: []models.Target{{Model: "big-model", Fallbacks: []string{testModel}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	d, err := New(Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: slog.New(slog.DiscardHandler), Metrics: metrics, Models: table})
	if err != nil {
		t.Fatal(err)
	}
	spec := pdSpec(longPrompt(1, 200), false, "")
	spec.Model = "gpt-4.1"
	tr, err := d.Begin(t.Context(), spec)
	if err != nil {
		t.Fatalf("a turn whose target has no endpoint: %v", err)
	}
	text, _ := readTurn(t, tr, false)
	tr.End(nil)
	if tr.Model() != testModel || len(text) == 0 {
		t.Errorf("served by %q: %q; want the fallback %q", tr.Model(), text, testModel)
	}
	if n := len(e.received()); n != 1 {
		t.Errorf("the fallback's engine got %d requests, want 1", n)
	}
	if n := testutil.ToFloat64(d.fallbacks); n != 1 {
		t.Errorf("%v fallbacks counted, want 1", n)
	}
}
