package scrape

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

const vllmMetrics = `# HELP vllm:prefix_cache_queries Prefix cache queries, in tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 500
# HELP vllm:prefix_cache_hits Prefix cache hits, in tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 400
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 100
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 1500
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 300
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{le="+Inf"} 3
vllm:time_to_first_token_seconds_sum 0.4
vllm:time_to_first_token_seconds_count 3
`

func TestParseEngineMetrics(t *testing.T) {
	m, err := ParseEngineMetrics(strings.NewReader(vllmMetrics))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		vllmQueries: 1500, vllmHits: 500, vllmPrompt: 1500, vllmGeneration: 300, "vllm:num_requests_running": 3,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if m.Has("vllm:time_to_first_token_seconds") {
		t.Error("histogram kept")
	}
	if _, err := ParseEngineMetrics(strings.NewReader("vllm:x{a=\"1\" 3\n")); err == nil {
		t.Error("malformed text accepted")
	}
}

func TestEngineDelta(t *testing.T) {
	tests := []struct {
		name          string
		before, after []EngineMetrics
		flavor        string
		rate          float64
		engines       int
	}{
		{"vllm summed over engines",
			[]EngineMetrics{{vllmQueries: 100, vllmHits: 10}, {vllmQueries: 0, vllmHits: 0}},
			[]EngineMetrics{{vllmQueries: 300, vllmHits: 110}, {vllmQueries: 200, vllmHits: 50}},
			"vllm", 150.0 / 400, 2},
		{"restarted engine counts from zero",
			[]EngineMetrics{{vllmQueries: 1000, vllmHits: 900}},
			[]EngineMetrics{{vllmQueries: 100, vllmHits: 25}},
			"vllm", 0.25, 1},
		{"old vllm names",
			[]EngineMetrics{{vllmGPUQueries: 0, vllmGPUHits: 0}},
			[]EngineMetrics{{vllmGPUQueries: 10, vllmGPUHits: 5}},
			"vllm", 0.5, 1},
		{"sglang token counters",
			[]EngineMetrics{{sglangPrompt: 0, sglangCached: 0}},
			[]EngineMetrics{{sglangPrompt: 400, sglangCached: 100}},
			"sglang", 0.25, 1},
		{"sglang hit-rate gauge",
			[]EngineMetrics{{sglangHitRate: 0}, {sglangHitRate: 0}},
			[]EngineMetrics{{sglangHitRate: 0.2}, {sglangHitRate: 0.4}},
			"sglang", 0.3, 2},
		{"failed scrape skipped",
			[]EngineMetrics{nil, {vllmQueries: 0, vllmHits: 0}},
			[]EngineMetrics{{vllmQueries: 9, vllmHits: 9}, {vllmQueries: 10, vllmHits: 1}},
			"vllm", 0.1, 1},
		{"no known metrics", []EngineMetrics{{"x": 1}}, []EngineMetrics{{"x": 2}}, "", 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ec := Delta(tc.before, tc.after, nil)
			if ec.Flavor != tc.flavor || math.Abs(ec.HitRate-tc.rate) > 1e-9 || ec.Engines != tc.engines {
				t.Errorf("got %+v, want flavor %q rate %v engines %d", ec, tc.flavor, tc.rate, tc.engines)
			}
		})
	}
}

func FuzzParseEngineMetrics(f *testing.F) {
	f.Add([]byte(vllmMetrics))
	f.Add([]byte("sglang:cache_hit_rate{model=\"m\"} 0.5\n"))
	f.Add([]byte("# TYPE x counter\nx_total NaN\nx_total +Inf\n"))
	f.Add([]byte("x{a=\"\\\"\"} 1 1700000000\n"))
	f.Add([]byte("{\"vllm:x\"} 2\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		m, err := ParseEngineMetrics(bytes.NewReader(text))
		if err != nil {
			return
		}
		for k, v := range m {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%s = %v kept", k, v)
			}
		}
		// Figures derived from any parse stay finite, so results marshal.
		ec := Delta([]EngineMetrics{m}, []EngineMetrics{m}, nil)
		if math.IsNaN(ec.HitRate) || math.IsInf(ec.HitRate, 0) {
			t.Fatalf("hit rate %v", ec.HitRate)
		}
	})
}
