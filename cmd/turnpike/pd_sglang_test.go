package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestSDKOverSGLangPD: chat and Responses, streamed and not, through an
// embedded SGLang-flavoured P/D fleet (--sim-topology pd --sim-flavor
// sglang) with the OpenAI SDK: every long turn goes to the prefill and
// the decode replica at once with one bootstrap room, the decoder pulls
// the room's KV; with the prefill replica killed, turns are still
// answered, prefilled by the decoder.
func TestSDKOverSGLangPD(t *testing.T) {
	st := startEmbeddedStack(t, simFlags{replicas: 2, accelerator: defaultSimAccelerator, model: defaultSimModel, served: defaultSimServedModel, flavor: sim.FlavorSGLang, topology: sim.TopologyPD})
	prefill := st.Pools()[0]
	if prefill.Role != pools.RolePrefill || prefill.Engine != pools.EngineSGLang || !strings.HasSuffix(prefill.Endpoints[0].URL, fmt.Sprintf(":%d", prefill.Endpoints[0].BootstrapPort)) {
		t.Fatalf("prefill pool %+v: want engine sglang, each endpoint's bootstrap port its own", prefill)
	}
	client := openai.NewClient(option.WithBaseURL("http://"+st.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	ctx := t.Context()
	long := func(i int) string {
		return fmt.Sprintf("Summarise log %d: ", i) + strings.Repeat(fmt.Sprintf("entry %d of the log; ", i), 400)
	}
	chat := func(i int) {
		t.Helper()
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: defaultSimServedModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long(i))}, MaxTokens: openai.Int(10),
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.Choices[0].Message.Content == "" || c.Usage.PromptTokens < 2000 || c.Usage.CompletionTokens == 0 {
			t.Errorf("chat %d: %q, usage %+v", i, c.Choices[0].Message.Content, c.Usage)
		}
	}
	chat(1)

	streamAndResponses(t, client, long, 2)

	metrics := "http://" + st.Addr() + "/metrics"
	if n := metric(t, metrics, `turnpike_pd_decisions_total{flavor="sglang",reason="disaggregated"}`); n != 4 {
		t.Errorf("%v SGLang-disaggregated turns, want 4", n)
	}
	if n := metric(t, metrics, `turnpike_pd_fallbacks_total{flavor="sglang",reason="prefill_failed"}`) + metric(t, metrics, `turnpike_pd_fallbacks_total{flavor="sglang",reason="kv_refused"}`); n != 0 {
		t.Errorf("%v fallbacks with the prefiller up", n)
	}
	urls := st.Fleet().URLs() // prefill first, then decode
	if n := metric(t, urls[1]+"/metrics", `vllm:nixl_xfer_time_seconds_count{model_name="`+defaultSimServedModel+`"}`); n != 4 {
		t.Errorf("decoder pulled %v times, want 4", n)
	}

	// The prefiller dies: the next turn is answered all the same.
	if err := st.Fleet().Kill(0); err != nil {
		t.Fatal(err)
	}
	chat(5)
	fell := metric(t, metrics, `turnpike_pd_fallbacks_total{flavor="sglang",reason="prefill_failed"}`) +
		metric(t, metrics, `turnpike_pd_fallbacks_total{flavor="sglang",reason="kv_refused"}`) +
		metric(t, metrics, `turnpike_pd_decisions_total{flavor="sglang",reason="no_prefiller"}`)
	if fell != 1 {
		t.Errorf("%v turns fell back or found no prefiller, want the one after the kill", fell)
	}
}

// streamAndResponses sends, with the SDK, a streamed chat of long(i), a
// response to long(i+1) and a streamed response to long(i+2), and checks
// each is answered whole.
func streamAndResponses(t *testing.T, client openai.Client, long func(int) string, i int) {
	t.Helper()
	ctx := t.Context()
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model: defaultSimServedModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long(i))}, MaxTokens: openai.Int(10),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content == "" || acc.Usage.CompletionTokens == 0 {
		t.Errorf("chat stream: %q, usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}

	r, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: defaultSimServedModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(long(i + 1))}, MaxOutputTokens: openai.Int(10),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != responses.ResponseStatusCompleted || r.OutputText() == "" {
		t.Errorf("response: %s %q", r.Status, r.OutputText())
	}
	rs := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: defaultSimServedModel, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(long(i + 2))}, MaxOutputTokens: openai.Int(10),
	})
	var deltas strings.Builder
	completed := false
	for rs.Next() {
		ev := rs.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			completed = true
		}
	}
	if err := rs.Err(); err != nil || !completed || deltas.Len() == 0 {
		t.Errorf("response stream: err %v, completed %v, text %q", err, completed, deltas.String())
	}
}
