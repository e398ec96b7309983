package report

import (
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench/driver"
)

// TestWriteCost prints the cost of two runs of a comparison, the second
// against the first: the report TestCostReport prices, and one half as
// dear.
func TestWriteCost(t *testing.T) {
	rep := &driver.CostReport{HardwareSeconds: 3600, TTFTTargetMs: 100, SLOAttainment: 0.5, Pools: []driver.PoolCost{
		{Pool: "gpu", Accelerator: "h200", Chips: 1, DollarsPerHour: 5, InputTokens: 1e+07, CachedInputTokens: 8e+06, OutputTokens: 1e+06, Dollars: 5, InputDollars: 0.2777777777777778, BusyShare: 1, BusyDollars: 5, InputPerMtok: 0.02777777777777778, OutputPerMtok: 4.722222222222222, PerMtok: 0.45454545454545453, BusyPerMtok: 0.45454545454545453},
		{Pool: "tpu", Accelerator: "tpu-v6e", Chips: 2, DollarsPerHour: 2.7, InputTokens: 500000, CachedInputTokens: 100000, OutputTokens: 2e+06, Dollars: 5.4, BusyShare: 0.125, BusyDollars: 0.675, OutputPerMtok: 2.7, PerMtok: 2.16, BusyPerMtok: 0.27},
	}, Overall: driver.PoolCost{Pool: "overall", Chips: 3, InputTokens: 1.05e+07, CachedInputTokens: 8.1e+06, OutputTokens: 3e+06, Dollars: 10.4, InputDollars: 0.2777777777777778, BusyShare: 0.5456730769230769, BusyDollars: 5.675, InputPerMtok: 0.026455026455026457, OutputPerMtok: 3.3740740740740742, PerMtok: 0.7703703703703704, BusyPerMtok: 0.42037037037037034}}
	all := rep.Overall
	base := &Result{Policy: "cache-aware", Cost: rep}
	cheaper := *rep
	cheaper.Overall.PerMtok, cheaper.Overall.BusyPerMtok = all.PerMtok/2, all.BusyPerMtok*0.9
	other := &Result{Policy: "cost-aware", Cost: &cheaper}
	var sb strings.Builder
	if err := writeCost(&sb, []*Result{base, other}, &Comparison{Baseline: "cache-aware"}, false); err != nil {
		t.Fatal(err)
	}
	out := sb.String()
	for _, want := range []string{"cache-aware: cost over 3600 s of hardware time; SLO attainment 50.0% (TTFT ≤ 100.0 ms)", "overall", "cost against cache-aware", "+50.0%", "+10.0%"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
