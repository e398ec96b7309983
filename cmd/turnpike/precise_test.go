package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// TestPreciseIndexSeesEvictionsOfAnotherClient: a prompt sent to an
// engine is recorded in two KV indexes as routing records it, one also
// fed by the engine's KV events (precise), one not (approximate). Then
// another client sends its own prompts straight to the engine (the bench's
// interfering client's prompts), more than its small cache holds, and the
// engine evicts the first prompt's blocks: the precise index stops
// crediting the engine with them, as the engine's own cache confirms (the
// prompt sent again finds nothing cached), while the approximate index
// still credits it with all of them.
func TestPreciseIndexSeesEvictionsOfAnotherClient(t *testing.T) {
	const blocks = 96 // 1,536 tokens of KV cache
	cfg := sim.Config{Accelerator: defaultSimAccelerator, Model: defaultSimModel, ServedModelName: defaultSimServedModel,
		NumBlocks: blocks, KVEventsAddr: "tcp://127.0.0.1:0"}
	fl, err := sim.StartFleet(t.Context(), 1, cfg, "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fl.Close() })
	engine := openai.NewClient(option.WithBaseURL(fl.URLs[0]+"/v1/"), option.WithAPIKey("direct"), option.WithMaxRetries(0))
	ctx := t.Context()

	hasher := &kv.Hasher{}
	precise, approximate := kv.NewIndex(kv.IndexOptions{}), kv.NewIndex(kv.IndexOptions{})
	sub := engineSubscriber(t, precise, fl.Engines[0].KVEventsAddr(), hasher)

	send := func(text string) *openai.ChatCompletion {
		t.Helper()
		c, err := engine.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: defaultSimServedModel, MaxTokens: openai.Int(1),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	credited := func(ix *kv.Index, hashes []kv.BlockHash) int {
		var out [1]kv.Match
		ix.MatchPrefix(hashes, out[:])
		return out[0].Blocks
	}
	// until polls cond while the subscriber catches up with the engine;
	// the bound only turns a hang into a failure.
	until := func(cond func() bool) bool {
		for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				return false
			}
		}
		return true
	}

	awaitEvents(t, sub, func(i int) { send(bench.InterferencePrompt(99, i, 20)) })

	session := bench.InterferencePrompt(1, 0, 400) // about 25 blocks
	p := &prompt.Prompt{Model: defaultSimServedModel, Messages: []prompt.Message{{Role: "user", Content: session}}}
	hashes := hasher.HashTokens(nil, defaultSimServedModel, prompt.Encode(prompt.Approx{}, nil, p))
	if len(hashes) < 20 || len(hashes) > blocks/2 {
		t.Fatalf("the session's prompt has %d blocks", len(hashes))
	}
	precise.Record(0, kv.HBM, hashes)
	approximate.Record(0, kv.HBM, hashes)
	send(session)
	if !until(func() bool { return sub.Stats().Events > 0 && credited(precise, hashes) == len(hashes) }) {
		t.Fatalf("precise index credits %d of %d blocks after the engine stored them", credited(precise, hashes), len(hashes))
	}

	// The other client: prompts of its own, together twice the cache.
	for i := range 4 {
		send(bench.InterferencePrompt(2, i, blocks*kv.DefaultBlockSize/2))
	}
	if !until(func() bool { return credited(precise, hashes) == 0 }) {
		t.Errorf("precise index still credits the engine with %d of %d evicted blocks", credited(precise, hashes), len(hashes))
	}
	if n := credited(approximate, hashes); n != len(hashes) {
		t.Errorf("approximate index credits %d of %d blocks, want all: it cannot know of evictions it did not cause", n, len(hashes))
	}
	if st := sub.Stats(); st.Skipped != 0 {
		t.Errorf("subscriber stats %+v: want nothing skipped", st)
	}
	// The engine agrees with the precise index: nothing of it is cached.
	if c := send(session); c.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("the engine found %d tokens of the evicted prompt cached", c.Usage.PromptTokensDetails.CachedTokens)
	}
}

// engineSubscriber runs a KV event subscriber feeding ix from the engine
// publishing at addr, until the test ends.
func engineSubscriber(t *testing.T, ix *kv.Index, addr string, hasher *kv.Hasher) *kv.Subscriber {
	t.Helper()
	sub, err := kv.NewSubscriber(ix, kv.SubscriberConfig{Addr: addr, Model: defaultSimServedModel, Hasher: hasher, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close(context.Background()) })
	return sub
}

// awaitEvents sends request i with send until sub hears the engine: a
// subscriber that joins a publisher late misses what came before.
func awaitEvents(t *testing.T, sub *kv.Subscriber, send func(i int)) {
	t.Helper()
	for i := 0; sub.Stats().Events == 0; i++ {
		if i == 200 {
			t.Fatal("no KV events heard from the engine")
		}
		send(i)
		time.Sleep(10 * time.Millisecond)
	}
}
