package scrape

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

func gatewayFrom(t *testing.T, text string) *gatewayScrape {
	t.Helper()
	fams, err := parseFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return gatewayScrapeOf(fams)
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
	queued := gatewayFrom(t, `turnpike_turns_queued{band="standard",tenant="a"} 2
turnpike_turns_queued{band="interactive",tenant="b"} 1
`)
	empty := gatewayFrom(t, `turnpike_turns_queued{band="standard",tenant="a"} 0`+"\n")
	// The gateway has sent e1 (roomy: 3 running of 4) a fourth request,
	// split between itself and a peer, that e1 does not count yet.
	sentFull := gatewayFrom(t, `turnpike_turns_queued{band="standard",tenant="a"} 2
turnpike_endpoint_in_flight_requests{endpoint="e1:8000",pool="p"} 3
turnpike_endpoint_peer_in_flight_requests{endpoint="e1:8000",pool="p"} 1
turnpike_endpoint_in_flight_requests{endpoint="e0:8000",pool="p"} 4
`)
	sentRoomy := gatewayFrom(t, `turnpike_turns_queued{band="standard",tenant="a"} 2
turnpike_endpoint_in_flight_requests{endpoint="e1:8000",pool="p"} 2
`)
	// Two running at 60% of the KV cache with two more on their way fill
	// it; one running at 20% with one more leaves room.
	kvHalf := engineScrape(t, `vllm:cache_config_info{block_size="16",max_num_seqs="64"} 1
vllm:num_requests_running 2
vllm:num_requests_waiting 0
vllm:kv_cache_usage_perc 0.6
`)
	kvLow := engineScrape(t, `vllm:cache_config_info{block_size="16",max_num_seqs="64"} 1
vllm:num_requests_running 1
vllm:num_requests_waiting 0
vllm:kv_cache_usage_perc 0.2
`)
	idleEngine := engineScrape(t, `vllm:num_requests_running 0
vllm:num_requests_waiting 0
`)
	idleOneSlot := engineScrape(t, `vllm:cache_config_info{block_size="16",max_num_seqs="1"} 1
vllm:num_requests_running 0
vllm:num_requests_waiting 0
`)
	twoComing := gatewayFrom(t, `turnpike_turns_queued{band="standard",tenant="a"} 2
turnpike_endpoint_in_flight_requests{endpoint="e1:8000",pool="p"} 4
`)
	oneComing := gatewayFrom(t, `turnpike_turns_queued{band="standard",tenant="a"} 2
turnpike_endpoint_in_flight_requests{endpoint="e1:8000",pool="p"} 2
`)
	if got := full["vllm:cache_config_info.max_num_seqs"]; got != 4 {
		t.Fatalf("max_num_seqs label read as %v", got)
	}
	hosts := []string{"e0:8000", "e1:8000"}
	for _, tc := range []struct {
		name    string
		engines []EngineMetrics
		gateway *gatewayScrape
		want    bool
	}{
		{"every engine full or queueing", []EngineMetrics{full, queueing}, queued, false},
		{"one engine below max_num_seqs", []EngineMetrics{full, roomy}, queued, true},
		{"below max_num_seqs, KV cache full", []EngineMetrics{full, kvFullUp}, queued, false},
		{"no limit reported, nothing waiting", []EngineMetrics{queueing, unknownLimit}, queued, true},
		{"room but nothing queued", []EngineMetrics{roomy}, empty, false},
		{"gateway unscraped", []EngineMetrics{roomy}, nil, false},
		{"failed engine scrape is no room", []EngineMetrics{nil, full}, queued, false},
		{"below max_num_seqs with the gateway's requests on their way", []EngineMetrics{full, roomy}, sentFull, false},
		{"below max_num_seqs, fewer sent than running", []EngineMetrics{full, roomy}, sentRoomy, true},
		{"KV cache filled by the requests on their way", []EngineMetrics{full, kvHalf}, twoComing, false},
		{"KV cache to spare after the requests on their way", []EngineMetrics{full, kvLow}, oneComing, true},
		{"requests on their way to an engine that runs none yet", []EngineMetrics{full, idleEngine}, oneComing, true},
		{"a request on its way takes an idle engine's one slot", []EngineMetrics{full, idleOneSlot}, oneComing, false},
		{"an idle engine with nothing on its way", []EngineMetrics{full, idleEngine}, queued, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := occupancySample(time.Second, tc.engines, hosts, tc.gateway)
			if s.IdleWhileQueued != tc.want {
				t.Fatalf("sample %+v: idle while queued %v, want %v", s, s.IdleWhileQueued, tc.want)
			}
			o := Occupancy{IntervalSeconds: 1}
			o.add(s)
			if (o.IdleWhileQueuedSeconds == 1) != tc.want {
				t.Fatalf("counted %d seconds", o.IdleWhileQueuedSeconds)
			}
			// Samples 1.5 s apart (a fleet at 1.5 times slower than
			// real time): three of them are 4.5 s, counted 5 (not 6).
			if tc.want {
				o := Occupancy{IntervalSeconds: 1.5}
				for range 3 {
					o.add(s)
				}
				if o.IdleWhileQueuedSeconds != 5 {
					t.Fatalf("three samples 1.5 s apart counted %d seconds, want 5", o.IdleWhileQueuedSeconds)
				}
			}
		})
	}
	if s := occupancySample(0, []EngineMetrics{nil, roomy}, hosts, queued); s.Running[0] != -1 || s.Running[1] != 3 || s.GatewayQueued != 3 || s.Sent[1] != -1 {
		t.Fatalf("sample %+v", s)
	}
	if s := occupancySample(0, []EngineMetrics{full, roomy}, hosts, sentFull); s.Sent[0] != 4 || s.Sent[1] != 4 {
		t.Fatalf("sent %v, want [4 4]", s.Sent)
	}
	if got := engineHosts([]string{"http://127.0.0.1:8001/metrics", "http://[::1]:9/metrics"}); got[0] != "127.0.0.1:8001" || got[1] != "[::1]:9" {
		t.Fatalf("engineHosts = %q", got)
	}
}
