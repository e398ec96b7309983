package report

import (
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench/scenario/lora"
)

// A lora comparison states each policy's adapter loads and, against the
// baseline, how many fewer and the TTFT ratio.
func TestLoRAComparison(t *testing.T) {
	rr := &Result{Policy: "round-robin", Workload: "lora", LoRA: &lora.Report{Adapters: 32, Requests: 384, Loads: 212, LoadsPer1000: 552, WaitedOnLoad: 225, TTFTP50Ms: 250}}
	ca := &Result{Policy: "cache-aware", Workload: "lora", LoRA: &lora.Report{Adapters: 32, Requests: 384, Loads: 29, LoadsPer1000: 75.5, WaitedOnLoad: 42, TTFTP50Ms: 50}}
	var b strings.Builder
	writeLoRAs(&b, []*Result{rr, ca}, "round-robin")
	out := b.String()
	for _, want := range []string{
		"round-robin:\nlora: 32 adapters",
		"212 adapter loads (552.0 per 1,000 requests), 225 requests waited on a load",
		"against round-robin: adapter loads per 1,000 requests 7.31× fewer, TTFT p50 0.20×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
