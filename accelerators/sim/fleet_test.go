package sim

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestFleet(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := StartFleet(ctx, 3, Config{Name: "demo", NumBlocks: 100}, "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.URLs) != 3 || len(f.Engines) != 3 {
		t.Fatalf("fleet of %d URLs, %d engines", len(f.URLs), len(f.Engines))
	}
	body := `{"prompt":"` + prompt(1, 400) + `","max_tokens":4}`
	cached := func(url string) int {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r := decode[textCompletion](t, resp)
		return r.Usage.PromptTokensDetails.CachedTokens
	}
	for i, url := range f.URLs {
		if f.Engines[i].Config().Name != "demo-"+string(rune('0'+i)) {
			t.Errorf("engine %d named %q", i, f.Engines[i].Config().Name)
		}
		if c := cached(url); c != 0 {
			t.Errorf("engine %d: first request hit %d tokens", i, c)
		}
	}
	if c := cached(f.URLs[0]); c == 0 {
		t.Error("repeat did not hit")
	}
	if err := f.ResetPrefixCaches(ctx); err != nil {
		t.Fatal(err)
	}
	if c := cached(f.URLs[0]); c != 0 {
		t.Errorf("after reset: %d cached tokens", c)
	}
}

func TestOffsetPort(t *testing.T) {
	tests := []struct {
		in   string
		i    int
		want string
		err  bool
	}{
		{"tcp://127.0.0.1:5557", 2, "tcp://127.0.0.1:5559", false},
		{"tcp://127.0.0.1:0", 2, "tcp://127.0.0.1:0", false},
		{"ipc:///tmp/x", 0, "", true},
	}
	for _, tt := range tests {
		got, err := offsetPort(tt.in, tt.i)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("offsetPort(%q, %d) = %q, %v", tt.in, tt.i, got, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{Flavor: "tgi", Accelerator: "abacus", TimeScale: -1, ErrorRate: 2, ErrorStatuses: []int{200}}
	err := cfg.EnsureDefaults().Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"flavor", "accelerator", "time scale", "error rate", "status 200"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	big := Config{Model: "llama-3.1-70b", Accelerator: "h100"}
	if err := big.EnsureDefaults().Validate(); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("70B on one H100: %v", err)
	}
	if err := new(Config).EnsureDefaults().Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

// TestFleetKillRestart: a killed replica cuts its streams and refuses
// connections; restarted, it serves on the same URL and KV event address
// from an empty cache, and the other replicas never notice.
func TestFleetKillRestart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Name: "demo", NumBlocks: 200, TimeScale: 1, KVEventsAddr: "tcp://127.0.0.1:0"}
	f, err := StartFleet(ctx, 2, cfg, "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	url, events := f.URLs[0], f.Engine(0).KVEventsAddr()
	body := `{"prompt":"` + prompt(1, 400) + `","max_tokens":4}`
	complete := func(url string) (cached int, err error) {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		return decode[textCompletion](t, resp).Usage.PromptTokensDetails.CachedTokens, nil
	}
	for range 2 {
		if _, err := complete(url); err != nil {
			t.Fatal(err)
		}
	}

	// A long stream, in flight when the replica dies.
	stream := `{"prompt":"` + prompt(2, 400) + `","max_tokens":2000,"ignore_eos":true,"stream":true}`
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data: ") {
		t.Fatalf("first line %q, %v", first, err)
	}
	if err := f.Kill(0); err != nil {
		t.Fatal(err)
	}
	if got, err := readSSE(resp); err == nil {
		t.Errorf("stream ended cleanly after the kill (%d more events)", len(got))
	}
	if _, err := complete(url); err == nil {
		t.Error("a killed replica answered")
	}
	if err := f.Kill(0); err == nil {
		t.Error("killed twice")
	}
	if _, err := complete(f.URLs[1]); err != nil {
		t.Errorf("the other replica: %v", err)
	}

	if err := f.Restart(0); err != nil {
		t.Fatal(err)
	}
	if err := f.Restart(0); err == nil {
		t.Error("restarted a running replica")
	}
	if got := f.Engine(0).KVEventsAddr(); got != events {
		t.Errorf("KV events on %s after the restart, want %s", got, events)
	}
	cached, err := complete(url)
	if err != nil {
		t.Fatalf("restarted replica: %v", err)
	}
	if cached != 0 {
		t.Errorf("restarted replica hit %d cached tokens, want a cold cache", cached)
	}
	if err := f.ResetPrefixCaches(ctx); err != nil {
		t.Error(err)
	}
	if err := f.Kill(2); err == nil {
		t.Error("killed a replica the fleet does not have")
	}
}

// TestFleetFrom: the later part of a fleet split over processes names and
// seeds its engines as the whole fleet would.
func TestFleetFrom(t *testing.T) {
	f, err := StartFleetFrom(t.Context(), 2, 2, Config{Name: "demo", NumBlocks: 100, Seed: 10}, "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, e := range f.Engines {
		if c := e.Config(); c.Name != fmt.Sprintf("demo-%d", 2+i) || c.Seed != uint64(12+i) {
			t.Errorf("engine %d of the part: named %q, seeded %d", i, c.Name, c.Seed)
		}
	}
	if _, err := StartFleetFrom(t.Context(), -1, 1, Config{}, "127.0.0.1", 0); err == nil {
		t.Error("a part from engine -1 started")
	}
}
