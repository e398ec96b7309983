package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// fakeEngine answers chat completions with a usage block: prompt tokens
// at 4 bytes a token, cached tokens 16 when the prompt was seen before.
type fakeEngine struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
	// arrived gets one value per request.
	arrived chan struct{}
}

func newFakeEngine(t *testing.T) *fakeEngine {
	f := &fakeEngine{arrived: make(chan struct{}, 1024)}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Model    string `json:"model"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Messages) != 1 || body.Model != "m" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		text := body.Messages[0].Content
		f.mu.Lock()
		cached := 0
		for _, g := range f.got {
			if g == text {
				cached = 16
			}
		}
		f.got = append(f.got, text)
		f.mu.Unlock()
		f.arrived <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"length","message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
			len(text)/4, len(text)/4+1, cached)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// TestInterference: the interfering client sends distinct prompts of the
// configured length to the first Engines engines only, and reports
// exactly what they answered.
func TestInterference(t *testing.T) {
	a, b, c := newFakeEngine(t), newFakeEngine(t), newFakeEngine(t)
	cfg := workload.Config{Model: "m", Interference: workload.InterferenceConfig{Rate: 1000, PromptTokens: 300, Engines: 2, MaxInFlight: 2}}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stop := startInterference(context.Background(), cfg, Target{EngineURLs: []string{a.srv.URL, b.srv.URL, c.srv.URL}})
	for range 3 {
		<-a.arrived
		<-b.arrived
	}
	rep := stop()

	a.mu.Lock()
	b.mu.Lock()
	sent := append(append([]string(nil), a.got...), b.got...)
	a.mu.Unlock()
	b.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) != 0 {
		t.Errorf("engine 3 got %d requests, want none (Engines 2)", len(c.got))
	}
	if rep.Requests != len(sent) || rep.Errors != 0 || len(rep.Engines) != 2 {
		t.Fatalf("report %+v, engines got %d requests", rep, len(sent))
	}
	want := 0
	firstBlocks := map[string]bool{}
	for _, s := range sent {
		want += len(s) / 4
		if n := len(s) / 4; n < 290 || n > 310 {
			t.Errorf("prompt of %d tokens, want about 300", n)
		}
		firstBlocks[s[:64]] = true
	}
	if rep.PromptTokens != want || rep.CachedTokens != 0 {
		t.Errorf("report counts %d prompt, %d cached tokens; engines were sent %d, none repeated", rep.PromptTokens, rep.CachedTokens, want)
	}
	if len(firstBlocks) != len(sent) {
		t.Errorf("%d prompts share their opening: %d distinct of %d", len(sent)-len(firstBlocks), len(firstBlocks), len(sent))
	}
}

// TestInterferenceOff: without a rate, or without engine URLs, nothing
// is sent and nothing reported.
func TestInterferenceOff(t *testing.T) {
	e := newFakeEngine(t)
	for _, tc := range []struct {
		name string
		rate float64
		urls []string
	}{{"no rate", 0, []string{e.srv.URL}}, {"no engines", 10, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := workload.Config{Model: "m", Interference: workload.InterferenceConfig{Rate: tc.rate}}
			cfg.EnsureDefaults()
			if rep := startInterference(context.Background(), cfg, Target{EngineURLs: tc.urls})(); rep != nil {
				t.Errorf("report %+v, want nil", rep)
			}
		})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.got) != 0 {
		t.Errorf("engine got %d requests", len(e.got))
	}
}

// TestEngineCacheExclude: the interfering client's tokens leave the
// engines' prefix-cache figures, so the hit rate is the run's own.
func TestEngineCacheExclude(t *testing.T) {
	ec := &scrape.EngineCache{Flavor: "vllm", QueriedTokens: 1000, HitTokens: 600, HitRate: 0.6}
	excludeInterference(ec, &InterferenceReport{PromptTokens: 250, CachedTokens: 0})
	if ec.QueriedTokens != 750 || ec.HitTokens != 600 || ec.HitRate != 0.8 {
		t.Errorf("after exclude: %+v, want 600 of 750 = 0.8", ec)
	}
	excludeInterference(ec, nil)
	if ec.HitRate != 0.8 {
		t.Errorf("exclude(nil) changed the figures: %+v", ec)
	}
}
