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
	"github.com/turnpike-gateway/turnpike/stack"
)

// TestEmbeddedShutdownDrainsStreams: a signal (the serve context ending)
// and the stack's Close let a stream in flight finish before the
// simulated engines under it stop: the gateway stops first, and nothing
// under it stops with the signal.
func TestEmbeddedShutdownDrainsStreams(t *testing.T) {
	cfg := &stack.Config{}
	cfg.EnsureDefaults()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	sf := simFlags{replicas: 2, accelerator: defaultSimAccelerator, model: defaultSimModel, served: defaultSimServedModel, flavor: sim.FlavorVLLM, timeScale: 1}
	simCfg := sf.config()
	ctx, signal := context.WithCancel(t.Context())
	defer signal()
	st, err := startStack(ctx, cfg, &sim.Topology{Config: simCfg, Replicas: sf.replicas}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"` + defaultSimServedModel + `","stream":true,"max_tokens":48,"ignore_eos":true,"messages":[{"role":"user","content":"hello"}]}`
	resp, err := http.Post("http://"+st.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(body))
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

// startStack builds and starts a stack of cfg, with the simulated fleet
// topology when set.
func startStack(ctx context.Context, cfg *stack.Config, topology *sim.Topology, log *slog.Logger) (*stack.Stack, error) {
	st, err := stack.New(cfg, stack.Options{Logger: log, Fleet: topology})
	if err != nil {
		return nil, err
	}
	if err := st.Start(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// TestServeStateURLFlag: --state-url selects Redis, and a bad one stops
// serve before anything starts.
func TestServeStateURLFlag(t *testing.T) {
	var out, errOut strings.Builder
	err := serveCmd(t.Context(), []string{"--addr", "127.0.0.1:0", "--state-url", "redis://h:1?mode=ring"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `mode "ring"`) {
		t.Fatalf("serve --state-url with a bad mode: %v", err)
	}
}
