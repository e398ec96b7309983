package main

import (
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/prompt/hf"
)

// qwen3Dir is the Qwen3 tokenizer and chat template kept for tests.
const qwen3Dir = "../../prompt/hf/testdata/qwen3"

// TestExactTokensEndToEnd: the simulator and the gateway both on the
// Qwen3 tokenizer (--sim-tokenizer). A chat turn, then its next turn: the
// engine counts the prompts the gateway predicts, token for token; the
// blocks the engine's KV events store hash, through the KV index's
// subscriber, to the very blocks the gateway routes by; and the next
// turn's cached tokens cover the first turn's prompt. The approximate
// tokenizer's blocks, by contrast, match nothing the engine stored.
func TestExactTokensEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the Qwen3 tokenizer three times")
	}
	st := startEmbeddedStack(t, simFlags{replicas: 1, accelerator: defaultSimAccelerator, model: defaultSimModel, served: defaultSimServedModel, flavor: sim.FlavorVLLM, tokenizer: qwen3Dir})
	if got := st.Pools()[0].Tokenizer; got.Kind != "hf" || got.Path != qwen3Dir {
		t.Fatalf("the embedded pool's tokenizer is %+v, want hf %s", got, qwen3Dir)
	}

	// A KV index of the test's own, fed by the engine's events alone.
	ix := kv.NewIndex(kv.IndexOptions{})
	hasher := &kv.Hasher{}
	sub := engineSubscriber(t, ix, st.Fleet().Engines()[0].KVEventsAddr(), hasher)

	m, err := hf.Load(qwen3Dir)
	if err != nil {
		t.Fatal(err)
	}
	gateway := &hf.Prompts{Model: m}
	client := openai.NewClient(option.WithBaseURL("http://"+st.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0),
		option.WithHeader("X-Session-Id", "exact-e2e"))
	ctx := t.Context()

	// held waits until the engine's events show it holding every block
	// of hashes.
	held := func(hashes []kv.BlockHash) int {
		var out [1]kv.Match
		deadline := time.Now().Add(20 * time.Second)
		for {
			ix.MatchPrefix(hashes, out[:])
			if out[0].Blocks == len(hashes) || time.Now().After(deadline) {
				return out[0].Blocks
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	awaitEvents(t, sub, func(int) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: defaultSimServedModel, MaxTokens: openai.Int(1),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("warm up the cache, please. ", 4))}})
		if err != nil {
			t.Fatal(err)
		}
	})

	system := "You are a careful reviewer. Answer in short sentences, cite line numbers, and never invent code."
	user1 := "Review this function:\n```go\n" + strings.Repeat("func add(a, b int) int { return a + b } // überprüft ✓\n", 30) + "```"
	msgs := []prompt.Message{{Role: "system", Content: system}, {Role: "user", Content: user1}}
	c1, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: defaultSimServedModel, MaxTokens: openai.Int(24),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user1)}})
	if err != nil {
		t.Fatal(err)
	}
	p1 := &prompt.Prompt{Model: defaultSimServedModel, Messages: msgs}
	ids1 := gateway.EncodePrompt(nil, p1, "")
	if int(c1.Usage.PromptTokens) != len(ids1) {
		t.Fatalf("the engine counted %d prompt tokens, the gateway predicts %d", c1.Usage.PromptTokens, len(ids1))
	}
	blocks1 := hasher.HashTokens(nil, defaultSimServedModel, ids1)
	if n := held(blocks1); n != len(blocks1) || n < 20 {
		t.Fatalf("the engine's events hold %d of the gateway's %d blocks of turn 1", n, len(blocks1))
	}
	approx := hasher.HashTokens(nil, defaultSimServedModel, prompt.Encode(prompt.Approx{}, nil, p1))
	var out [1]kv.Match
	if ix.MatchPrefix(approx, out[:]); out[0].Blocks != 0 {
		t.Errorf("the approximate tokenizer's blocks match %d stored blocks, want none", out[0].Blocks)
	}

	answer := c1.Choices[0].Message.Content
	user2 := "Now suggest a test for it."
	c2, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: defaultSimServedModel, MaxTokens: openai.Int(24),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user1), openai.AssistantMessage(answer), openai.UserMessage(user2)}})
	if err != nil {
		t.Fatal(err)
	}
	p2 := &prompt.Prompt{Model: defaultSimServedModel, Messages: append(msgs, prompt.Message{Role: "assistant", Content: answer}, prompt.Message{Role: "user", Content: user2})}
	ids2 := gateway.EncodePrompt(nil, p2, "")
	if int(c2.Usage.PromptTokens) != len(ids2) {
		t.Fatalf("turn 2: the engine counted %d prompt tokens, the gateway predicts %d", c2.Usage.PromptTokens, len(ids2))
	}
	if cached := int(c2.Usage.PromptTokensDetails.CachedTokens); cached < len(blocks1)*kv.DefaultBlockSize {
		t.Errorf("turn 2 found %d tokens cached, want at least turn 1's %d prompt blocks (%d tokens)", cached, len(blocks1), len(blocks1)*kv.DefaultBlockSize)
	}
	blocks2 := hasher.HashTokens(nil, defaultSimServedModel, ids2)
	if n := held(blocks2); n != len(blocks2) {
		t.Errorf("the engine's events hold %d of the gateway's %d blocks of turn 2", n, len(blocks2))
	}

	// The gateway encoded turn 2 from turn 1's seam, under the session's
	// key, and its template rendered every prompt.
	page := "http://" + st.Addr() + "/metrics"
	labels := `tokenizer="` + qwen3Dir + `"`
	if n := metric(t, page, `turnpike_token_cache_turns_total{result="reused",`+labels+`}`); n < 1 {
		t.Errorf("the gateway's token cache reused %v turns, want turn 2", n)
	}
	if n := metric(t, page, `turnpike_chat_template_failures_total{`+labels+`}`); n != 0 {
		t.Errorf("%v prompts refused by the chat template", n)
	}

	// The Responses API: input_tokens answers the engine's own count of
	// the prompt, and a chained turn is encoded from its chain's seam and
	// finds the first turn's prompt cached.
	reused := metric(t, page, `turnpike_token_cache_turns_total{result="reused",`+labels+`}`)
	in1 := responses.ResponseNewParamsInputUnion{OfString: openai.String(user1)}
	count, err := client.Responses.InputTokens.Count(ctx, responses.InputTokenCountParams{Model: openai.String(defaultSimServedModel),
		Instructions: openai.String(system), Input: responses.InputTokenCountParamsInputUnion{OfString: openai.String(user1)}})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: defaultSimServedModel, Instructions: openai.String(system), Input: in1, MaxOutputTokens: openai.Int(24)})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Usage.InputTokens != count.InputTokens {
		t.Errorf("input_tokens answered %d, the engine counted %d", count.InputTokens, r1.Usage.InputTokens)
	}
	r2, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: defaultSimServedModel, Instructions: openai.String(system),
		PreviousResponseID: openai.String(r1.ID), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(user2)}, MaxOutputTokens: openai.Int(24)})
	if err != nil {
		t.Fatal(err)
	}
	if full := r1.Usage.InputTokens / kv.DefaultBlockSize * kv.DefaultBlockSize; r2.Usage.InputTokensDetails.CachedTokens < full {
		t.Errorf("the chained turn found %d tokens cached, want turn 1's %d", r2.Usage.InputTokensDetails.CachedTokens, full)
	}
	if n := metric(t, page, `turnpike_token_cache_turns_total{result="reused",`+labels+`}`); n < reused+1 {
		t.Errorf("the chained turn was encoded whole (reused %v, then %v)", reused, n)
	}
}
