package pools

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
)

const vllmExposition = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 7
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="27000"} 1
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1200
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 300
`

const sglangExposition = `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 2
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 5
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.25
`

// legacyExposition spells the KV cache series as vLLM did before their
// rename, as older TPU images export them.
const legacyExposition = `vllm:num_requests_running{model_name="m"} 1
vllm:gpu_cache_usage_perc{model_name="m"} 0.3
vllm:gpu_prefix_cache_queries_total{model_name="m"} 500
vllm:gpu_prefix_cache_hits_total{model_name="m"} 200
`

func TestParseLoad(t *testing.T) {
	tests := []struct {
		name, flavour, text string
		want                Load
	}{
		{"vllm", EngineVLLM, vllmExposition, Load{Running: 3, Waiting: 7, KVUsage: 0.42, BlockSize: 16, NumGPUBlocks: 27000,
			PrefixQueries: 1000, PrefixHits: 640, PromptTokens: 1200, GenerationTokens: 300}},
		{"sglang", EngineSGLang, sglangExposition, Load{Running: 2, Waiting: 5, KVUsage: 0.25}},
		{"vllm with scheduler limits", EngineVLLM, "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"600\",max_num_seqs=\"16\",max_num_batched_tokens=\"2048\"} 1\n",
			Load{BlockSize: 16, NumGPUBlocks: 600, MaxNumSeqs: 16, MaxBatchedTokens: 2048}},
		{"sglang limits, no chunking", EngineSGLang, "sglang:cache_config_info{page_size=\"1\",max_total_num_tokens=\"90000\",max_running_requests=\"48\",chunked_prefill_size=\"-1\"} 1\n",
			Load{BlockSize: 1, NumGPUBlocks: 90000, MaxNumSeqs: 48}},
		{"vllm names ignored by sglang", EngineSGLang, vllmExposition, Load{}},
		{"vllm-tpu, current names", EngineVLLMTPU, vllmExposition, Load{Running: 3, Waiting: 7, KVUsage: 0.42, BlockSize: 16, NumGPUBlocks: 27000,
			PrefixQueries: 1000, PrefixHits: 640, PromptTokens: 1200, GenerationTokens: 300}},
		{"vllm-tpu, names before the rename", EngineVLLMTPU, legacyExposition, Load{Running: 1, KVUsage: 0.3, PrefixQueries: 500, PrefixHits: 200}},
		{"vllm-tpu prefers the current name", EngineVLLMTPU, legacyExposition + "vllm:kv_cache_usage_perc 0.5\n", Load{Running: 1, KVUsage: 0.5, PrefixQueries: 500, PrefixHits: 200}},
		{"vllm reads only the current names", EngineVLLM, legacyExposition, Load{Running: 1}},
		{"empty", EngineVLLM, "", Load{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLoad(tt.flavour, strings.NewReader(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if _, err := ParseLoad(EngineVLLM, strings.NewReader("vllm:num_requests_running{ 3\n")); err == nil {
		t.Error("malformed exposition accepted")
	}
	if _, err := ParseLoad("tgi", strings.NewReader("")); err == nil {
		t.Error("unknown flavour accepted")
	}
}

func FuzzParseLoad(f *testing.F) {
	f.Add(vllmExposition)
	f.Add(sglangExposition)
	f.Add(legacyExposition)
	f.Add("# TYPE x counter\nx 1e309\n")
	f.Add("# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"a,b\",waiting_lora_adapters=\"\"} 1.7e9\nvllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"c\",waiting_lora_adapters=\"d\"} 1.8e9\n")
	f.Add("# HELP vllm:prompt_tokens Prompt tokens.\n# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{model_name=\"m\"} 7\nvllm:prompt_tokens_created 1\n")
	f.Add("# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} 2\nvllm:num_requests_running 3\n")
	f.Fuzz(func(t *testing.T, text string) {
		for _, flavour := range []string{EngineVLLM, EngineVLLMTPU, EngineSGLang} {
			l, err := ParseLoad(flavour, strings.NewReader(text))
			if err != nil && l != (Load{}) {
				t.Fatalf("%s: error with a non-zero load: %+v", flavour, l)
			}
			// Parsing only the lines of the families read finds what
			// parsing the whole page finds, whenever the whole page parses.
			names := flavours[flavour]
			parser := expfmt.NewTextParser(model.LegacyValidation)
			fams, whole := parser.TextToMetricFamilies(strings.NewReader(text))
			if whole != nil {
				continue
			}
			if want := names.load(fams); err != nil || !sameLoad(l, want) {
				t.Fatalf("%s: %+v, %v from the lines kept; the whole page gives %+v", flavour, l, err, want)
			}
		}
	})
}

// startSim serves a simulated engine on a loopback port until the test
// ends.
func startSim(tb testing.TB, cfg sim.Config) (*sim.Engine, *httptest.Server) {
	tb.Helper()
	eng, err := sim.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(eng.Handler())
	tb.Cleanup(func() {
		srv.Close()
		eng.Close()
	})
	return eng, srv
}

func newTestRegistry(t *testing.T, urls ...string) *Registry {
	t.Helper()
	var eps []EndpointConfig
	for _, u := range urls {
		eps = append(eps, EndpointConfig{URL: u})
	}
	r, err := NewRegistry([]PoolConfig{{Name: "p", Model: "llama-3.1-8b", Accelerator: "h100", ServedModels: []string{"m"}, Endpoints: eps}},
		Options{ScrapeInterval: 20 * time.Millisecond, HealthInterval: 20 * time.Millisecond, ConnectTimeout: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// TestScrapeAndStaleness scrapes a real simulated engine, then stops it and
// watches the load age into staleness.
func TestScrapeAndStaleness(t *testing.T) {
	eng, srv := startSim(t, sim.Config{ServedModelName: "m", TimeScale: 0})
	r := newTestRegistry(t, srv.URL)
	ep := r.Endpoints()[0]
	if !ep.Stale(time.Now()) {
		t.Fatal("an endpoint never scraped must be stale")
	}
	r.Start(context.Background())
	waitFor(t, "first scrape", func() bool { return !ep.Stale(time.Now()) })
	if l := ep.Load(); l.BlockSize != 16 || l.NumGPUBlocks != eng.NumBlocks() {
		t.Fatalf("cache config not scraped: %+v (engine has %d blocks)", l, eng.NumBlocks())
	}
	srv.Close()
	waitFor(t, "staleness after the engine went away", func() bool { return ep.Stale(time.Now()) })
	waitFor(t, "health check to notice", func() bool { return !ep.Healthy() })
	if ep.Available() {
		t.Fatal("an unhealthy endpoint must not be available")
	}
}

// TestScrapeTPUFlavour scrapes a simulated TPU engine, which spells its KV
// cache series as TPU images on older vLLM releases do, through a pool of
// engine vllm-tpu.
func TestScrapeTPUFlavour(t *testing.T) {
	eng, srv := startSim(t, sim.Config{ServedModelName: "m", Flavor: sim.FlavorVLLMTPU, Accelerator: "tpu-v6e", TimeScale: 0})
	resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hello there","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r, err := NewRegistry([]PoolConfig{{Name: "tpu", Engine: EngineVLLMTPU, Accelerator: "tpu-v6e", Model: "llama-3.1-8b", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: srv.URL}}}},
		Options{ScrapeInterval: 20 * time.Millisecond, HealthInterval: time.Second, ConnectTimeout: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	r.Start(context.Background())
	ep := r.Endpoints()[0]
	waitFor(t, "first scrape", func() bool { return !ep.Stale(time.Now()) })
	if l := ep.Load(); l.NumGPUBlocks != eng.NumBlocks() || l.PrefixQueries == 0 || l.PromptTokens == 0 {
		t.Fatalf("TPU engine's load not read: %+v (engine has %d blocks)", l, eng.NumBlocks())
	}
}

func TestHealthRecovers(t *testing.T) {
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	r := newTestRegistry(t, srv.URL)
	r.Start(context.Background())
	ep := r.Endpoints()[0]
	waitFor(t, "unhealthy", func() bool { return !ep.Healthy() })
	healthy.Store(true)
	waitFor(t, "healthy again", func() bool { return ep.Healthy() && ep.Available() })
}

// TestHealthThresholds scripts an engine's answers to successive /health
// probes (F: 503, T: no answer before the probe's timeout, O: 200) and
// reads the endpoint's health as each next probe arrives: the verdict of
// the probes so far (H healthy, U unhealthy).
func TestHealthThresholds(t *testing.T) {
	tests := []struct {
		name, script, want string
		threshold          int
	}{
		{"failures apart are not enough", "FOFFO", "HHHHH", 3},
		{"three in a row", "FFFFO", "HHUUH", 3},
		{"timeouts count", "TTTO", "HHUH", 3},
		{"failures of both kinds add up", "FTFO", "HHUH", 3},
		{"a success starts the count again", "FFOFFFO", "HHHHHUH", 3},
		{"threshold one", "FOO", "UHH", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var probes atomic.Int64
			var ep atomic.Pointer[Endpoint]
			seen := make(chan bool, len(tt.script))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/health" {
					return // the scraper's /metrics: an empty exposition
				}
				k := int(probes.Add(1)) - 1
				if k >= 1 && k <= len(tt.script) {
					seen <- ep.Load().Healthy()
				}
				if k >= len(tt.script) {
					return
				}
				switch tt.script[k] {
				case 'F':
					w.WriteHeader(http.StatusServiceUnavailable)
				case 'T':
					<-r.Context().Done() // until the probe gives up
				}
			}))
			defer srv.Close()
			r, err := NewRegistry([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: srv.URL}}}},
				Options{HealthInterval: 5 * time.Millisecond, ScrapeInterval: time.Hour, ConnectTimeout: 50 * time.Millisecond, HealthFailures: tt.threshold},
				slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			ep.Store(r.Endpoints()[0])
			r.Start(t.Context())
			var got strings.Builder
			for range tt.script {
				select {
				case h := <-seen:
					if h {
						got.WriteByte('H')
					} else {
						got.WriteByte('U')
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("probes stopped after %q", got.String())
				}
			}
			if got.String() != tt.want {
				t.Errorf("health after each probe %q, want %q (script %q)", got.String(), tt.want, tt.script)
			}
		})
	}
}

// TestHealthCheckRefused: a refused connection makes an endpoint unhealthy
// at once, whatever the threshold; a slow or failing engine does not.
func TestHealthCheckRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := http.Get("http://" + addr + "/health")
	if !errors.Is(refused, syscall.ECONNREFUSED) {
		t.Skipf("dialing a closed port gave %v, not a refused connection", refused)
	}
	tests := []struct {
		name    string
		err     error
		healthy bool
	}{
		{"refused", refused, false},
		{"timeout", context.DeadlineExceeded, true},
		{"5xx", errors.New("pools: x/health: status 503"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := healthCheck{threshold: 5}
			if got := h.observe(true, tt.err); got != tt.healthy {
				t.Errorf("healthy = %v after one %s probe, want %v", got, tt.name, tt.healthy)
			}
			if !h.observe(false, nil) {
				t.Error("one passing probe did not make the endpoint healthy")
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	o := Options{HealthFailures: -1}
	o.EnsureDefaults()
	err := o.Validate()
	if fe := FieldErrors(err); len(fe) != 1 || fe[0].Field != "fleet.healthFailures" {
		t.Fatalf("Validate = %v, want one problem with fleet.healthFailures", err)
	}
	if _, err := NewRegistry([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://x:1"}}}}, o, nil); err == nil {
		t.Error("NewRegistry accepted healthFailures -1")
	}
	o = Options{}
	o.EnsureDefaults()
	if o.HealthFailures != DefaultHealthFailures || o.Validate() != nil {
		t.Errorf("defaults: healthFailures %d, Validate %v", o.HealthFailures, o.Validate())
	}
}

func TestSendTracksInFlight(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	r := newTestRegistry(t, srv.URL)
	ep := r.Endpoints()[0]
	resp, err := r.Client().Send(context.Background(), ep, "/v1/chat/completions", []byte(`{}`), nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	if ep.InFlight() != 1 || ep.InFlightTokens() != 100 {
		t.Fatalf("in flight %d / %d tokens, want 1 / 100", ep.InFlight(), ep.InFlightTokens())
	}
	close(release)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp.Body.Close() // a second close must not release twice
	if ep.InFlight() != 0 || ep.InFlightTokens() != 0 {
		t.Fatalf("in flight %d / %d tokens after close, want 0", ep.InFlight(), ep.InFlightTokens())
	}
}

func TestSendClassifiesFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusBadGateway)
	}))
	r := newTestRegistry(t, srv.URL)
	ep := r.Endpoints()[0]
	_, err := r.Client().Send(context.Background(), ep, "/x", nil, nil, 0)
	var ue *UpstreamError
	if !asUpstream(err, &ue) || ue.StatusCode != http.StatusBadGateway || string(ue.Body) != "boom\n" {
		t.Fatalf("5xx: got %v", err)
	}
	srv.Close()
	_, err = r.Client().Send(context.Background(), ep, "/x", nil, nil, 0)
	if err == nil || !strings.Contains(err.Error(), "upstream failure") {
		t.Fatalf("connection refused: got %v", err)
	}
	if ep.InFlight() != 0 {
		t.Fatalf("failed sends leaked in-flight count %d", ep.InFlight())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func asUpstream(err error, target **UpstreamError) bool { return errors.As(err, target) }

// TestRoofline prices a TPU v6e and an H200 pool of one 8B model: about
// the same prefill rate, the H200's decode three times the TPU's (HBM
// bandwidth 4.8 against 1.64 TB/s); nothing without profiles.
func TestRoofline(t *testing.T) {
	r, err := NewRegistry([]PoolConfig{
		{Name: "gpu", Accelerator: "h200", Model: "llama-3.1-8b", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://10.0.0.1:8000"}}},
		{Name: "tpu", Engine: EngineVLLMTPU, Accelerator: "tpu-v6e", Model: "llama-3.1-8b", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://10.0.0.2:8000"}}},
		{Name: "bare", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://10.0.0.3:8000"}}},
	}, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	gpu, tpu, bare := r.Pools[0], r.Pools[1], r.Pools[2]
	if p := gpu.DollarsPerHour(); p != 5 {
		t.Errorf("h200 price %v", p)
	}
	if p := tpu.DollarsPerHour(); p != 2.7 {
		t.Errorf("tpu-v6e price %v", p)
	}
	gp, tp := gpu.RooflinePrefillRate(), tpu.RooflinePrefillRate()
	if gp < 25_000 || gp > 35_000 || tp < 25_000 || tp > 35_000 {
		t.Errorf("prefill rates: h200 %.0f, tpu-v6e %.0f tokens/s", gp, tp)
	}
	gd, td := gpu.RooflineDecodeRate(32, 4096), tpu.RooflineDecodeRate(32, 4096)
	if x := gd / td; x < 2.5 || x > 3.5 {
		t.Errorf("decode: h200 %.0f, tpu-v6e %.0f tokens/s (%.2f×)", gd, td, x)
	}
	if bare.DollarsPerHour() != 0 || bare.RooflinePrefillRate() != 0 || bare.RooflineDecodeRate(32, 4096) != 0 {
		t.Error("a pool without profiles has no price or roofline")
	}
}

// TestEngineQueue holds the estimate of an engine's queue between scrapes
// to what the engine does with the requests sent since: it starts them
// while it has sequences and KV cache to spare and queues the rest, and
// queues them all once it queues at all.
func TestEngineQueue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		load     Load
		inFlight int64
		want     int64
	}{
		{"room for all sent since", Load{Running: 10, MaxNumSeqs: 16, KVUsage: 0.5}, 14, 0},
		{"more sent than room", Load{Running: 10, MaxNumSeqs: 16, KVUsage: 0.5}, 18, 2},
		{"engine queued", Load{Running: 16, Waiting: 2, MaxNumSeqs: 16, KVUsage: 0.5}, 21, 5},
		{"queued under its seq limit", Load{Running: 4, Waiting: 1, MaxNumSeqs: 16, KVUsage: 0.5}, 7, 3},
		{"KV cache nearly full", Load{Running: 4, MaxNumSeqs: 16, KVUsage: 0.95}, 7, 3},
		{"no limit reported", Load{Running: 4}, 7, 3},
		{"requests done since", Load{Running: 10, MaxNumSeqs: 16}, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := &Endpoint{staleAfter: time.Minute}
			l := tc.load
			l.ScrapedAt = time.Now()
			ep.SetLoad(l)
			ep.inFlight.Store(tc.inFlight)
			if got := ep.EngineQueue(time.Now()); got != tc.want {
				t.Fatalf("EngineQueue = %d, want %d", got, tc.want)
			}
		})
	}
	ep := &Endpoint{staleAfter: time.Minute}
	ep.inFlight.Store(3)
	if got := ep.EngineQueue(time.Now()); got != 3 {
		t.Fatalf("never scraped: EngineQueue = %d, want the 3 in flight", got)
	}
}

// TestWaitingFallsAsRequestsAnswer: each answer begun and each request
// ended after a scrape is one fewer waiting in the engine's queue until
// the next scrape says how many wait.
func TestWaitingFallsAsRequestsAnswer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("data: {}\n\n"))
		w.(http.Flusher).Flush()
		<-release
		w.Write([]byte("data: [DONE]\n\n"))
	}))
	defer srv.Close()
	defer close(release)
	r := newTestRegistry(t, srv.URL)
	ep := r.Endpoints()[0]
	ep.SetLoad(Load{Running: 16, Waiting: 6, MaxNumSeqs: 16, ScrapedAt: time.Now()})
	waiting := func(want int64, after string) {
		t.Helper()
		if got := ep.Waiting(time.Now()); got != want {
			t.Fatalf("Waiting = %d %s, want %d", got, after, want)
		}
	}
	send := func() *http.Response {
		t.Helper()
		resp, err := r.Client().Send(context.Background(), ep, "/v1/chat/completions", []byte(`{}`), nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	waiting(6, "as scraped")
	a := send()
	waiting(6, "after a request was sent")
	a.Body.Read(make([]byte, 64))
	waiting(5, "after its first answer")
	b := send()
	b.Body.Read(make([]byte, 2))
	b.Body.Read(make([]byte, 2)) // a later read is not another answer
	waiting(4, "after a second answer")
	a.Body.Close()
	waiting(3, "after one ended")
	send().Body.Close() // ended without a byte read: its answer and its end
	waiting(1, "after a request ended unread")
	c := send()
	c.Body.Read(make([]byte, 64))
	waiting(0, "after more answers than were waiting")
	b.Body.Close()
	c.Body.Close()
	ep.SetLoad(Load{Running: 16, Waiting: 2, MaxNumSeqs: 16, ScrapedAt: time.Now()})
	waiting(2, "after a new scrape")
	ep.SetLoad(Load{Running: 16, Waiting: 2, ScrapedAt: time.Now().Add(-time.Hour)})
	waiting(0, "on a stale report")
}

// BenchmarkParseLoad parses one scrape of a simulated vLLM engine that has
// served requests (its latency histograms filled), the work each endpoint
// costs the gateway every scrapeInterval.
func BenchmarkParseLoad(b *testing.B) {
	_, srv := startSim(b, sim.Config{ServedModelName: "m", TimeScale: 0})
	for range 4 {
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"m","prompt":"hello there","max_tokens":4}`))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseLoad(EngineVLLM, bytes.NewReader(page)); err != nil {
			b.Fatal(err)
		}
	}
}

// sameLoad compares loads, NaN equal to NaN.
func sameLoad(a, b Load) bool {
	eq := func(x, y float64) bool { return x == y || (x != x && y != y) }
	return a.Running == b.Running && a.Waiting == b.Waiting && eq(a.KVUsage, b.KVUsage) &&
		a.BlockSize == b.BlockSize && a.NumGPUBlocks == b.NumGPUBlocks && a.MaxNumSeqs == b.MaxNumSeqs &&
		a.MaxBatchedTokens == b.MaxBatchedTokens && eq(a.PrefixQueries, b.PrefixQueries) &&
		eq(a.PrefixHits, b.PrefixHits) && eq(a.PromptTokens, b.PromptTokens) && eq(a.GenerationTokens, b.GenerationTokens) &&
		a.LoRA == b.LoRA
}

// TestSetEndpoints: a static pool's list replaced while the registry runs
// (a reload of the config file): the endpoint no longer listed leaves and
// drains, the new one joins, the one kept is the same endpoint.
func TestSetEndpoints(t *testing.T) {
	r := newTestRegistry(t, "http://127.0.0.1:1", "http://127.0.0.1:2")
	joined := make(chan string, 4)
	r.OnJoin(func(ep *Endpoint) { joined <- ep.ID })
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-joined
	<-joined
	kept, _ := r.Endpoint("127.0.0.1:1")
	left, _ := r.Endpoint("127.0.0.1:2")
	if err := r.SetEndpoints("p", []EndpointConfig{{URL: "http://127.0.0.1:1"}, {URL: "http://127.0.0.1:3"}}); err != nil {
		t.Fatal(err)
	}
	if id := <-joined; id != "127.0.0.1:3" {
		t.Fatalf("joined %s, want 127.0.0.1:3", id)
	}
	<-left.Drained()
	var ids []string
	for _, ep := range r.Endpoints() {
		ids = append(ids, ep.ID)
	}
	if got, _ := r.Endpoint("127.0.0.1:1"); got != kept || !slices.Equal(ids, []string{"127.0.0.1:1", "127.0.0.1:3"}) && !slices.Equal(ids, []string{"127.0.0.1:3", "127.0.0.1:1"}) {
		t.Fatalf("after SetEndpoints: %v, the kept endpoint the same: %v", ids, got == kept)
	}
	if err := r.SetEndpoints("nope", nil); err == nil {
		t.Fatal("SetEndpoints of an unknown pool: no error")
	}
}
