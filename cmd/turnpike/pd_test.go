package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/stack"
)

// startPDStack starts the embedded stack with --sim-topology pd: one
// prefill and one decode replica, as fast as the CPU allows.
func startPDStack(t *testing.T) *stack.Stack {
	t.Helper()
	return startEmbeddedStack(t, simFlags{replicas: 2, accelerator: defaultSimAccelerator, model: defaultSimModel, served: defaultSimServedModel, flavor: sim.FlavorVLLM, topology: sim.TopologyPD})
}

// startEmbeddedStack starts the embedded stack over the fleet sf asks
// for, on an ephemeral port with state in a temporary directory.
func startEmbeddedStack(t *testing.T, sf simFlags) *stack.Stack {
	t.Helper()
	cfg := &stack.Config{}
	cfg.EnsureDefaults()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	fl, err := sf.fleet()
	if err != nil {
		t.Fatal(err)
	}
	st, err := startStack(t.Context(), cfg, fl, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st
}

// metric reads one series' value from a Prometheus text page.
func metric(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestSDKOverPD: chat and Responses, streamed and not, through an
// embedded P/D fleet with the OpenAI SDK: every long turn is prefilled
// on the prefill replica and decoded on the decode replica, which pulls
// the KV; the client sees ordinary answers.
func TestSDKOverPD(t *testing.T) {
	st := startPDStack(t)
	client := openai.NewClient(option.WithBaseURL("http://"+st.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx := t.Context()
	long := func(i int) string {
		return fmt.Sprintf("Review change %d: ", i) + strings.Repeat(fmt.Sprintf("line %d of the diff; ", i), 400)
	}

	chat, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: defaultSimServedModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long(1))}, MaxTokens: openai.Int(10),
	})
	if err != nil {
		t.Fatal(err)
	}
	if chat.Choices[0].Message.Content == "" || chat.Usage.PromptTokens < 2000 {
		t.Errorf("chat: %q, usage %+v", chat.Choices[0].Message.Content, chat.Usage)
	}
	// The same prompt again: the decoder holds it now (the pulled KV entered
	// its prefix cache), so it serves the turn alone, from cache.
	again, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model: defaultSimServedModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long(1))}, MaxTokens: openai.Int(10),
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := again.Usage.PromptTokensDetails.CachedTokens; c < again.Usage.PromptTokens-16 {
		t.Errorf("repeated prompt: %d of %d cached, want the decoder's hit", c, again.Usage.PromptTokens)
	}

	streamAndResponses(t, client, long, 2)

	if n := metric(t, "http://"+st.Addr()+"/metrics", `turnpike_pd_decisions_total{flavor="vllm",reason="disaggregated"}`); n != 4 {
		t.Errorf("%v disaggregated turns, want 4", n)
	}
	if n := metric(t, "http://"+st.Addr()+"/metrics", `turnpike_pd_decisions_total{flavor="vllm",reason="below_threshold"}`); n != 1 {
		t.Errorf("%v turns left on the warm decoder, want 1", n)
	}
	urls := st.Fleet().URLs() // prefill first, then decode
	if n := metric(t, urls[1]+"/metrics", `vllm:nixl_xfer_time_seconds_count{model_name="`+defaultSimServedModel+`"}`); n != 4 {
		t.Errorf("decoder pulled %v times, want 4", n)
	}
}

func TestSimTopologyFlags(t *testing.T) {
	for _, c := range []struct {
		sf      simFlags
		prefill int
		err     string
	}{
		{simFlags{replicas: 4, topology: sim.TopologyPD}, 2, ""},
		{simFlags{replicas: 4, topology: sim.TopologyPD, prefill: 3}, 3, ""},
		{simFlags{replicas: 4}, 0, ""},
		{simFlags{replicas: 1, topology: sim.TopologyPD}, 0, "at least one prefill and one decode"},
		{simFlags{replicas: 4, topology: sim.TopologyPD, prefill: 4}, 0, "at least one prefill and one decode"},
		{simFlags{replicas: 4, topology: "mesh"}, 0, `"mesh" is not`},
	} {
		got, err := c.sf.fleet()
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %v, want %q", c.sf, err, c.err)
			}
		case err != nil:
			t.Errorf("%+v: %v", c.sf, err)
		case got.Prefill != c.prefill:
			t.Errorf("%+v: %d prefill replicas, want %d", c.sf, got.Prefill, c.prefill)
		}
	}
}

func TestConfigRoutingPD(t *testing.T) {
	c, err := stack.Parse([]byte(`
pools:
  - {name: prefill, model: llama-3.1-8b, servedModels: [m], role: prefill, endpoints: [{url: "http://p:8000"}]}
  - {name: decode, model: llama-3.1-8b, servedModels: [m], role: decode, endpoints: [{url: "http://d:8000"}]}
routing:
  policy: cache-aware
  pd: {uncachedTokens: 1024, prefillTimeout: 5s}
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Routing.PD.UncachedTokens != 1024 || c.Routing.PD.PrefillTimeout.String() != "5s" || c.Routing.Policy != "cache-aware" {
		t.Errorf("routing %+v", c.Routing)
	}
	c, err = stack.Parse([]byte("pools:\n  - {name: a, servedModels: [m], endpoints: [{url: \"http://a:1\"}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Routing.PD.UncachedTokens != 512 {
		t.Errorf("default uncachedTokens %d, want 512", c.Routing.PD.UncachedTokens)
	}
	if _, err := stack.Parse([]byte("pools:\n  - {name: a, servedModels: [m], endpoints: [{url: \"http://a:1\"}]}\nrouting:\n  pd: {uncached: 3}\n")); err == nil {
		t.Error("an unknown routing.pd key was accepted")
	}
}
