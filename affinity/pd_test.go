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
			if d.HasArg("uncachedTokens") {
				cfg = PDConfig{}
				d.ScanArgs(t, "uncachedTokens", &cfg.UncachedTokens)
				cfg.EnsureDefaults()
			}
			return fmt.Sprintf("uncachedTokens=%d prefillTimeout=%v", cfg.UncachedTokens, cfg.PrefillTimeout)
		case "decide":
			var prompt, cached, prefillers int
			d.ScanArgs(t, "prompt", &prompt)
			d.ScanArgs(t, "cached", &cached)
			d.ScanArgs(t, "prefillers", &prefillers)
			dec := cfg.Decide(prompt, cached, prefillers)
			verdict := "local"
			if dec.Disaggregate {
				verdict = "disaggregate"
			}
			return fmt.Sprintf("%s uncached=%d reason=%s", verdict, dec.Uncached, dec.Reason)
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
