package affinity

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

func TestPDDecider(t *testing.T) {
	var cfg PDConfig
	cfg.EnsureDefaults()
	datadriven.RunTest(t, "testdata/pd_decider", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "config":
			if d.HasArg("uncachedTokens") || d.HasArg("maxPrefillQueue") {
				cfg = PDConfig{}
				if d.HasArg("uncachedTokens") {
					d.ScanArgs(t, "uncachedTokens", &cfg.UncachedTokens)
				}
				if d.HasArg("maxPrefillQueue") {
					d.ScanArgs(t, "maxPrefillQueue", &cfg.MaxPrefillQueue)
				}
				cfg.EnsureDefaults()
			}
			return fmt.Sprintf("uncachedTokens=%d prefillTimeout=%v maxPrefillQueue=%d", cfg.UncachedTokens, cfg.PrefillTimeout, cfg.MaxPrefillQueue)
		case "decide":
			var prompt, cached, prefillers, incompatible, queued int
			d.ScanArgs(t, "prompt", &prompt)
			d.ScanArgs(t, "cached", &cached)
			d.ScanArgs(t, "prefillers", &prefillers)
			if d.HasArg("incompatible") {
				d.ScanArgs(t, "incompatible", &incompatible)
			}
			if d.HasArg("queued") {
				d.ScanArgs(t, "queued", &queued)
			}
			dec := cfg.Decide(prompt, cached, prefillers, incompatible, queued)
			verdict := "local"
			if dec.Disaggregate {
				verdict = "disaggregate"
			}
			return fmt.Sprintf("%s uncached=%d reason=%s", verdict, dec.Uncached, dec.Reason)
		}
		return "unknown command " + d.Cmd
	})
}

// TestPDRevisions: which prefill and decode revisions pair.
func TestPDRevisions(t *testing.T) {
	var cfg PDConfig
	datadriven.RunTest(t, "testdata/pd_revisions", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "revisions":
			cfg = PDConfig{}
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				if line == "" {
					continue
				}
				var g []string
				for _, r := range strings.Fields(line) {
					g = append(g, strings.Trim(r, `"`))
				}
				cfg.CompatibleRevisions = append(cfg.CompatibleRevisions, g)
			}
			if err := cfg.Validate(); err != nil {
				return "error: " + err.Error()
			}
			return fmt.Sprintf("groups: %v", cfg.CompatibleRevisions)
		case "pair":
			var prefill, decode string
			d.ScanArgs(t, "prefill", &prefill)
			d.ScanArgs(t, "decode", &decode)
			return fmt.Sprint(cfg.Compatible(prefill, decode))
		}
		return "unknown command " + d.Cmd
	})
}

func TestPDConfigValidate(t *testing.T) {
	c := PDConfig{PrefillTimeout: -1}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "prefillTimeout") {
		t.Errorf("Validate: %v", err)
	}
}
