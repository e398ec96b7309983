package scrape

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestEngineITLFromHistograms(t *testing.T) {
	page := func(le10, le50, le300, inf int) string {
		return strings.NewReplacer("A", strconv.Itoa(le10), "B", strconv.Itoa(le50), "C", strconv.Itoa(le300), "D", strconv.Itoa(inf)).Replace(`# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{model_name="m",le="0.01"} A
vllm:inter_token_latency_seconds_bucket{model_name="m",le="0.05"} B
vllm:inter_token_latency_seconds_bucket{model_name="m",le="0.3"} C
vllm:inter_token_latency_seconds_bucket{model_name="m",le="+Inf"} D
vllm:inter_token_latency_seconds_sum{model_name="m"} 1
vllm:inter_token_latency_seconds_count{model_name="m"} D
`)
	}
	parse := func(s string) EngineMetrics {
		m, err := ParseEngineMetrics(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// Two engines; the run adds 90 fast gaps and 10 slow ones in all.
	before := []EngineMetrics{parse(page(5, 5, 5, 5)), parse(page(0, 0, 0, 0))}
	after := []EngineMetrics{parse(page(50, 50, 55, 55)), parse(page(45, 45, 50, 50))}
	var ec EngineCache
	engineITL(&ec, before, after)
	if math.Abs(ec.ITLP50Ms-10*50.0/90) > 1e-9 {
		t.Errorf("p50 %v ms, want inside the first bucket", ec.ITLP50Ms)
	}
	// rank 99 of 100: in (0.05, 0.3], 9 of its 10 gaps.
	if want := 50 + 250*9.0/10; math.Abs(ec.ITLP99Ms-want) > 1e-9 {
		t.Errorf("p99 %v ms, want %v", ec.ITLP99Ms, want)
	}
	if q := HistogramQuantile(0.5, nil, nil); q != 0 {
		t.Errorf("empty: %v", q)
	}
}
