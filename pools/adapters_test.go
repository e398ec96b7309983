package pools

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
)

func TestParseLoRAInfo(t *testing.T) {
	// Each label set vLLM ever set stays exported; the latest is current.
	page := `# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.7e9
vllm:lora_requests_info{max_lora="4",running_lora_adapters="c",waiting_lora_adapters="d"} 1.8e9
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.6e9
vllm:num_requests_running{model_name="m"} 2
`
	l, err := ParseLoad(EngineVLLM, strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := LoRALoad{Reported: true, MaxLoRA: 4, Running: "c", Waiting: "d"}
	if l.LoRA != want || l.Running != 2 {
		t.Errorf("got %+v running %d, want %+v", l.LoRA, l.Running, want)
	}
	if l, _ := ParseLoad(EngineVLLM, strings.NewReader("vllm:num_requests_running 1\n")); l.LoRA.Reported {
		t.Errorf("an engine without adapters reports LoRA: %+v", l.LoRA)
	}
}

func TestParseAdapters(t *testing.T) {
	body := `{"object":"list","data":[
		{"id":"base","root":"meta/base","parent":null},
		{"id":"sql","root":"/adapters/sql","parent":"base"},
		{"id":"chat","root":"/adapters/chat","parent":"base"}]}`
	names, paths, err := ParseAdapters(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names, ","); got != "chat,sql" || paths["sql"] != "/adapters/sql" {
		t.Errorf("adapters %s, paths %v", got, paths)
	}
	if _, _, err := ParseAdapters(strings.NewReader("{")); err == nil {
		t.Error("a broken body parses")
	}
}

func FuzzParseAdapters(f *testing.F) {
	f.Add(`{"data":[{"id":"a","root":"/a","parent":"m"}]}`)
	f.Add(`{"data":[{"id":"","parent":""},{"id":"a","parent":null}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		names, paths, err := ParseAdapters(strings.NewReader(body))
		if err != nil {
			return
		}
		for i, n := range names {
			if n == "" || (i > 0 && names[i-1] >= n) {
				t.Fatalf("adapters %q not sorted and unique", names)
			}
			if _, ok := paths[n]; !ok {
				t.Fatalf("no path for %q", n)
			}
		}
	})
}

// A registry learns a replica's adapters from its engine's /v1/models and
// lora metric, serves requests for them there, and with loraLoading
// on-demand loads an adapter once for the requests that arrive while it
// loads.
func TestAdapterDiscoveryAndOnDemandLoad(t *testing.T) {
	eng, err := sim.New(sim.Config{ServedModelName: "m", MaxLoRAs: 2, TimeScale: 0.05,
		LoRAAdapters: []sim.LoRAAdapter{{Name: "sql", Preload: true}, {Name: "chat"}}})
	if err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	h := eng.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == sim.LoadLoRAPath {
			loads.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); eng.Close() })
	pc := PoolConfig{Name: "p", ServedModels: []string{"m"}, LoRALoading: LoRALoadingOnDemand,
		Adapters:  []AdapterConfig{{Name: "chat", Path: "/adapters/chat"}},
		Endpoints: []EndpointConfig{{URL: srv.URL}}}
	r, err := NewRegistry([]PoolConfig{pc}, Options{ScrapeInterval: 20 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(ctx) })
	ep := r.Endpoints()[0]

	// The adapters listed (/v1/models) and the slots (/metrics) come from
	// two reads of the engine, which may land in different scrapes.
	waitFor(t, "sql listed and the slots read", func() bool {
		_, slots := ep.AdapterSlots(time.Now())
		return len(r.Serving("sql")) == 1 && slots > 0
	})
	if !ep.HasAdapter("sql", time.Now()) || ep.HasAdapter("chat", time.Now()) {
		t.Fatalf("sql preloaded, chat not: has sql %v, chat %v", ep.HasAdapter("sql", time.Now()), ep.HasAdapter("chat", time.Now()))
	}
	if used, slots := ep.AdapterSlots(time.Now()); used != 1 || slots != 2 {
		t.Errorf("slots %d/%d, want 1/2", used, slots)
	}
	if len(r.Serving("chat")) != 1 || len(r.Serving("other")) != 0 {
		t.Errorf("configured adapter not served, or an unknown one is")
	}

	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.EnsureAdapter(ctx, ep, "chat", time.Now()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := loads.Load(); n != 1 {
		t.Errorf("%d loads for four requests, want one", n)
	}
	if err := r.EnsureAdapter(ctx, ep, "m", time.Now()); err != nil || loads.Load() != 1 {
		t.Errorf("the base model loaded something: %v", err)
	}
	waitFor(t, "chat listed", func() bool { return strings.Join(ep.listedAdapters(), ",") == "chat,sql" })

	// A load the engine refuses is an upstream error.
	pc2 := pc
	pc2.Adapters = []AdapterConfig{{Name: "ghost", Path: "/x"}}
	p := &Pool{Config: pc2}
	refusing := httptest.NewServer(http.NotFoundHandler())
	defer refusing.Close()
	u, _ := url.Parse(refusing.URL)
	bad := &Endpoint{ID: "bad", URL: u, Pool: p}
	if err := r.EnsureAdapter(ctx, bad, "ghost", time.Now()); !errors.Is(err, ErrAdapterLoad) || !errors.Is(err, ErrUpstream) {
		t.Errorf("failed load: %v", err)
	}
}
