package stack

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/admin"
)

// TestReloadRevisions: routing.revisions reloads (a canary's weights
// changed in the file apply to the sessions assigned from then on, a
// model no longer listed goes back to the newest revision);
// routing.handOff needs a restart.
func TestReloadRevisions(t *testing.T) {
	e := startCountingEngine(t, "m")
	path := filepath.Join(t.TempDir(), "turnpike.yaml")
	write := func(routing string) {
		t.Helper()
		body := reloadConfig([]*countingEngine{e}, "cache-aware", "1m", "")
		body = strings.Replace(body, "routing:\n  policy: cache-aware\n", "routing:\n  policy: cache-aware\n"+routing, 1)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("  revisions: {m: {weights: {v2: 10, v1: 90}}}\n")
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	st, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), ConfigPath: path, Adjust: func(c *Config) { c.DataDir = cfg.DataDir }})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	revs := st.reload.dispatch.Revisions()
	if p, _ := revs.Policy("m"); p.Weights["v2"] != 10 {
		t.Fatalf("weights at start: %v", p.Weights)
	}
	write("  revisions: {m: {weights: {v2: 50, v1: 50}}}\n")
	if res := st.Reload(t.Context(), TriggerSignal); res.Result != admin.ReloadSuccess || len(res.NeedsRestart) > 0 {
		t.Fatalf("reload: %+v", res)
	}
	if p, _ := revs.Policy("m"); p.Weights["v2"] != 50 {
		t.Errorf("weights after the reload: %v", p.Weights)
	}
	write("  handOff: {disableWarmUp: true}\n")
	res := st.Reload(t.Context(), TriggerSignal)
	if res.Result != admin.ReloadSuccess || !slices.Equal(res.NeedsRestart, []string{"routing.handOff"}) {
		t.Fatalf("reload: %+v", res)
	}
	if _, ok := revs.Policy("m"); ok {
		t.Error("a model no longer in routing.revisions keeps its weights")
	}
}
