package sim

import (
	"context"
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
