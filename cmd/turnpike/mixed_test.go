package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
	"github.com/turnpike-gateway/turnpike/turns"
)

// mixedFlags is --sim-topology mixed of three replicas of an 8B model, as
// fast as the CPU allows.
func mixedFlags() simFlags {
	return simFlags{replicas: 3, accelerator: defaultSimAccelerator, model: "llama-3.1-8b", served: defaultSimServedModel, flavor: sim.FlavorVLLM, topology: sim.TopologyMixed}
}

// TestMixedTopology starts the mixed fleet under the cost-aware policy:
// an H200 pool of vLLM and a TPU v6e pool of vLLM on TPU behind one model
// name, each engine scraped under its own flavour, each pool saturating at
// its own engines' capacity; a long prompt with a one-token answer goes to
// the TPU (cheaper to prefill on), a short one with a long answer to the
// H200 (cheaper to decode on).
func TestMixedTopology(t *testing.T) {
	f := mixedFlags()
	fl, err := f.fleet()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &stack.Config{}
	cfg.Routing.Policy = affinity.PolicyCostAware
	cfg.EnsureDefaults()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	st, err := startStack(t.Context(), cfg, fl, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })

	if len(st.Registry().Pools) != 2 {
		t.Fatalf("%d pools", len(st.Registry().Pools))
	}
	gpu, tpu := st.Registry().Pools[0], st.Registry().Pools[1]
	if gpu.Config.Accelerator != "h200" || gpu.Config.Engine != pools.EngineVLLM || len(gpu.Endpoints()) != 2 ||
		tpu.Config.Accelerator != "tpu-v6e" || tpu.Config.Engine != pools.EngineVLLMTPU || len(tpu.Endpoints()) != 1 {
		t.Fatalf("pools %+v and %+v", gpu.Config, tpu.Config)
	}
	engines := st.Fleet().Engines()
	deadline := time.Now().Add(10 * time.Second)
	for _, ep := range st.Registry().Endpoints() {
		for ep.Stale(time.Now()) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got, want := ep.Load().NumGPUBlocks, engines[ep.Index].NumBlocks(); got != want || want == 0 {
			t.Errorf("%s (%s): scraped %d KV blocks, engine has %d", ep.ID, ep.Pool.Name(), got, want)
		}
	}
	// Each pool saturates at its own capacity: the TPU's 32 GB hold far
	// fewer tokens in flight than an H200's 141 GB.
	fc := cfg.FlowControl
	fc.EnsureDefaults()
	gm, tm := turns.PoolCapacity{Pool: gpu}.Measure(time.Now(), &fc), turns.PoolCapacity{Pool: tpu}.Measure(time.Now(), &fc)
	if !(tm.Room > 0 && gm.Room/2 > 3*tm.Room) {
		t.Errorf("room per endpoint: h200 %d, tpu-v6e %d tokens", gm.Room/2, tm.Room)
	}

	client := openai.NewClient(option.WithBaseURL("http://"+st.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	served := func(prompt string, maxTokens int64) string {
		t.Helper()
		before := make([]int64, len(engines))
		for i, e := range engines {
			before[i] = e.Stats().Steps
		}
		chat, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model: defaultSimServedModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(maxTokens),
		})
		if err != nil {
			t.Fatal(err)
		}
		if chat.Choices[0].Message.Content == "" {
			t.Fatalf("empty answer: %+v", chat)
		}
		// The engine counts its step after the answer has left it.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			for i, e := range engines {
				if e.Stats().Steps > before[i] {
					return st.Registry().Endpoints()[i].Pool.Name()
				}
			}
		}
		t.Fatal("no engine counted the prompt")
		return ""
	}
	if p := served(strings.Repeat("Summarise this line of the log. ", 600), 1); p != "tpu" {
		t.Errorf("a long prompt with a one-token answer went to %s, want tpu", p)
	}
	if p := served("Write a long story.", 1024); p != "gpu" {
		t.Errorf("a short prompt with a long answer went to %s, want gpu", p)
	}
	page := "http://" + st.Addr() + "/metrics"
	if v := metric(t, page, `turnpike_affinity_price_decisions_total{outcome="within-slo"}`); v < 2 {
		t.Errorf("price decisions within the SLO: %v", v)
	}
	if v := metric(t, page, `turnpike_affinity_decisions_total{policy="cost-aware",reason="no-cache"}`); v < 2 {
		t.Errorf("cost-aware decisions: %v", v)
	}
	resp, err := http.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `turnpike_affinity_endpoint_cost_dollars_per_mtok{endpoint=`) {
		t.Error("no endpoint cost gauge after answers")
	}
}

func TestMixedTopologyFlags(t *testing.T) {
	f := mixedFlags()
	f.model = "llama-3.1-70b"
	if _, err := f.fleet(); err == nil || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("70B on one chip: %v", err)
	}
	f = mixedFlags()
	f.replicas = 1
	if _, err := f.fleet(); err == nil {
		t.Error("one replica for two pools accepted")
	}
}
