package kv

import (
	"context"
	"testing"
	"time"
)

// An adapter's KV blocks are apart from the base model's: the gateway
// seeds an adapter's prompt with the adapter (the request's model), and
// the engine's events for an adapter's blocks (lora_id, lora_name) are
// mapped onto that chain. The base model's blocks never count as cached
// for the adapter, nor the adapter's for the base model.
func TestAdapterBlocksAreSeparate(t *testing.T) {
	_, tokens, base := testPrompt(t)
	h := &Hasher{}
	adapter := h.HashTokens(nil, "sql-lora", tokens)
	if len(adapter) != len(base) || adapter[0] == base[0] {
		t.Fatalf("the adapter's chain starts as the base model's: %v, %v", adapter[:1], base[:1])
	}
	bs := DefaultBlockSize
	ix := NewIndex(IndexOptions{})
	s, err := NewSubscriber(ix, SubscriberConfig{Endpoint: 0, Addr: "tcp://127.0.0.1:1", Model: testModel, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s.now = time.Now
	seq := uint64(0)
	send := func(batch any) {
		t.Helper()
		s.handle(ctx, frames(t, seq, batch))
		seq++
	}
	loraStored := func(hashes []any, tokens []uint32, id any, name any) []any {
		return []any{"BlockStored", hashes, nil, tokens, bs, id, "GPU", name}
	}

	// The base model's prefix, stored by the engine.
	send(batchOf(stored([]any{1, 2, 3}, nil, tokens[:3*bs], "GPU")))
	if m := matchOf(ix, base, 0); m.Blocks != 3 {
		t.Fatalf("base prompt: %d blocks, want 3", m.Blocks)
	}
	if m := matchOf(ix, adapter, 0); m.Blocks != 0 {
		t.Fatalf("the base model's prefix counts for the adapter: %d blocks", m.Blocks)
	}

	// The same tokens computed with the adapter.
	send(batchOf(loraStored([]any{11, 12}, tokens[:2*bs], 3, "sql-lora")))
	if m := matchOf(ix, adapter, 0); m.Blocks != 2 {
		t.Fatalf("adapter prompt: %d blocks, want 2", m.Blocks)
	}
	if m := matchOf(ix, base, 0); m.Blocks != 3 {
		t.Fatalf("base prompt after the adapter's blocks: %d blocks, want 3", m.Blocks)
	}

	// An engine that names the adapter only by its id: its blocks are
	// skipped, never taken for the base model's.
	before := s.Stats().Skipped
	send(batchOf(loraStored([]any{21, 22, 23, 24}, tokens[:4*bs], 4, nil)))
	if got := s.Stats().Skipped - before; got != 1 {
		t.Fatalf("skipped %d events, want 1", got)
	}
	if m := matchOf(ix, base, 0); m.Blocks != 3 {
		t.Fatalf("an adapter's blocks without a name counted for the base model: %d", m.Blocks)
	}
}
