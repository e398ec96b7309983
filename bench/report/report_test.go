package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Each figure's median is over a policy's runs, and a run counts as at
// least as good as the baseline's of its repetition on a tie too.
func TestComparisonMedians(t *testing.T) {
	run := func(policy string, k int, p50, tput float64, errs int, idle *int) *Result {
		r := &Result{Policy: policy, Run: k}
		r.Total.TTFT.P50Ms, r.Total.OutputTokensPerSec, r.Total.Errors = p50, tput, errs
		if idle != nil {
			r.Occupancy = &scrape.Occupancy{IdleWhileQueuedSeconds: *idle}
		}
		return r
	}
	zero, one := 0, 1
	c := &Comparison{Repeat: 4, Baseline: BaselinePolicy, Results: []*Result{
		run(BaselinePolicy, 1, 100, 10, 2, &zero), run("cache-aware", 1, 90, 11, 2, &zero),
		run(BaselinePolicy, 2, 100, 10, 2, &zero), run("cache-aware", 2, 100, 9, 3, &one),
		run(BaselinePolicy, 3, 120, 12, 0, nil), run("cache-aware", 3, 130, 12, 0, nil),
		run(BaselinePolicy, 4, 80, 10, 1, &zero), run("cache-aware", 4, 70, 14, 1, &zero),
	}}
	for _, r := range c.Results {
		// cache-aware's p99 is the higher in every run.
		r.Total.TTFT.P99Ms = 100
		if r.Policy == "cache-aware" {
			r.Total.TTFT.P99Ms = 200
		}
	}
	c.computeMedians([]string{BaselinePolicy, "cache-aware"})
	if len(c.Medians) != 2 {
		t.Fatalf("medians %+v", c.Medians)
	}
	base, ca := c.Medians[0], c.Medians[1]
	if base.TTFTP50Ms != 100 || base.OutputTokensPerSec != 10 || base.Errors != 1.5 || base.IdleWhileQueuedSeconds != 0 {
		t.Errorf("baseline medians %+v", base)
	}
	if ca.TTFTP50Ms != 95 || ca.OutputTokensPerSec != 11.5 || ca.Errors != 1.5 || ca.IdleWhileQueuedSeconds != 0 {
		t.Errorf("cache-aware medians %+v", ca)
	}
	for fig, want := range map[string][2]int{"ttft_p50": {3, 4}, "throughput": {3, 4}, "errors": {3, 4}, "idle_while_queued": {2, 3}} {
		if got := [2]int{ca.AtLeastAsGood[fig], ca.Compared[fig]}; got != want {
			t.Errorf("%s: at least as good in %d of %d, want %d of %d", fig, got[0], got[1], want[0], want[1])
		}
	}
	if n, ok := c.Medians[1].AtLeastAsGood["ttft_p99"]; !ok || n != 0 {
		t.Errorf("p99, at least as good in no run: %d, %v", n, ok)
	}
	var b bytes.Buffer
	if err := medianTable(c).WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "3/4") || !strings.Contains(b.String(), "2/3") {
		t.Errorf("median table:\n%s", b.String())
	}
}

func TestWriteHTMLSingle(t *testing.T) {
	res := &Result{Workload: workload.WorkloadAgentic, API: workload.APIResponses,
		CDF:      driver.CDF{Percentiles: driver.CDFGrid, TTFTMs: ramp(len(driver.CDFGrid)), E2EMs: ramp(len(driver.CDFGrid))},
		Timeline: driver.Timeline{BucketSeconds: 1, OutputTokensPerSec: []float64{1, 5, 3}, Completed: []int{1, 2, 3}, Errors: []int{0, 0, 0}},
	}
	res.Policy = `<script>alert(1)</script>`
	var b bytes.Buffer
	if err := WriteHTML(&b, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "<svg") || !strings.Contains(out, "<polyline") {
		t.Error("no plot")
	}
	if strings.Contains(out, "<script") || strings.Contains(out, "src=") || strings.Contains(out, "href=") {
		t.Error("report loads or runs something, or failed to escape a name")
	}
	if !strings.Contains(out, "no data") {
		t.Error("an empty ITL plot should say so")
	}
}

func ramp(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(i + 1)
	}
	return v
}
