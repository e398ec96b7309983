package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
)

// TestEmbeddedShutdownDrainsStreams: a signal (the serve context ending)
// and the stack's Close let a stream in flight finish before the
// simulated engines under it stop: the gateway stops first, and nothing
// under it stops with the signal.
func TestEmbeddedShutdownDrainsStreams(t *testing.T) {
	cfg := &Config{}
	cfg.EnsureDefaults()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	sf := simFlags{replicas: 2, accelerator: defaultSimAccelerator, model: defaultSimModel, served: defaultSimServedModel, flavor: sim.FlavorVLLM, timeScale: 1}
	simCfg := sf.config()
	ctx, signal := context.WithCancel(t.Context())
	defer signal()
	st, err := startStack(ctx, cfg, &simFleet{cfg: simCfg, replicas: sf.replicas}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"` + defaultSimServedModel + `","stream":true,"max_tokens":48,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
	resp, err := http.Post("http://"+st.addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	signal() // as serveCmd sees SIGTERM: then it closes the stack
	closed := make(chan error, 1)
	go func() { closed <- st.Close(context.Background()) }()
	rest, _ := io.ReadAll(br)
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || strings.Contains(string(rest), `"error"`) {
		t.Fatalf("a stream in flight at shutdown ended with %q", rest)
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
}
