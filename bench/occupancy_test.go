package bench

import (
	"strings"
	"testing"
	"time"
)

func engineScrape(t *testing.T, text string) EngineMetrics {
	t.Helper()
	m, err := ParseEngineMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestIdleWhileQueued: a second counts as idle while queued when the
// gateway holds turns and some engine could start another sequence.
func TestIdleWhileQueued(t *testing.T) {
	full := engineScrape(t, `vllm:cache_config_info{block_size="16",max_num_seqs="4"} 1
vllm:num_requests_running 4
vllm:num_requests_waiting 0
`)
	queueing := engineScrape(t, `vllm:num_requests_running 2
vllm:num_requests_waiting 3
`)
	roomy := engineScrape(t, `vllm:cache_config_info{block_size="16",max_num_seqs="4"} 1
vllm:num_requests_running 3
vllm:num_requests_waiting 0
`)
	kvFullUp := engineScrape(t, `vllm:cache_config_info{block_size="16",max_num_seqs="4"} 1
vllm:num_requests_running 2
vllm:num_requests_waiting 0
vllm:kv_cache_usage_perc 0.97
`)
	unknownLimit := engineScrape(t, "sglang:num_running_reqs 300\nsglang:num_queue_reqs 0\n")
	queued := engineScrape(t, `turnpike_turns_queued{band="standard",tenant="a"} 2
turnpike_turns_queued{band="interactive",tenant="b"} 1
`)
	empty := engineScrape(t, `turnpike_turns_queued{band="standard",tenant="a"} 0`+"\n")
	if got := full["vllm:cache_config_info.max_num_seqs"]; got != 4 {
		t.Fatalf("max_num_seqs label read as %v", got)
	}
	for _, tc := range []struct {
		name    string
		engines []EngineMetrics
		gateway EngineMetrics
		want    bool
	}{
		{"every engine full or queueing", []EngineMetrics{full, queueing}, queued, false},
		{"one engine below max_num_seqs", []EngineMetrics{full, roomy}, queued, true},
		{"below max_num_seqs, KV cache full", []EngineMetrics{full, kvFullUp}, queued, false},
		{"no limit reported, nothing waiting", []EngineMetrics{queueing, unknownLimit}, queued, true},
		{"room but nothing queued", []EngineMetrics{roomy}, empty, false},
		{"gateway unscraped", []EngineMetrics{roomy}, nil, false},
		{"failed engine scrape is no room", []EngineMetrics{nil, full}, queued, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := occupancySample(time.Second, tc.engines, tc.gateway)
			if s.IdleWhileQueued != tc.want {
				t.Fatalf("sample %+v: idle while queued %v, want %v", s, s.IdleWhileQueued, tc.want)
			}
			var o Occupancy
			o.add(s)
			if (o.IdleWhileQueuedSeconds == 1) != tc.want {
				t.Fatalf("counted %d seconds", o.IdleWhileQueuedSeconds)
			}
		})
	}
	if s := occupancySample(0, []EngineMetrics{nil, roomy}, queued); s.Running[0] != -1 || s.Running[1] != 3 || s.GatewayQueued != 3 {
		t.Fatalf("sample %+v", s)
	}
}
