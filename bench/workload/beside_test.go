package workload

import (
	"strings"
	"testing"
)

func TestInterferenceValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Interference: InterferenceConfig{Rate: -1, PromptTokens: -5}}, []string{"interference.rate -1", "prompt_tokens"}},
		{Config{Workload: WorkloadIsolation, Interference: InterferenceConfig{Rate: 1}}, []string{"beside the agentic and trace"}},
	} {
		tc.cfg.EnsureDefaults()
		err := tc.cfg.Validate()
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate() = %v, want it to say %q", err, want)
			}
		}
	}
}
