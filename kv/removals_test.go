package kv

import (
	"context"
	"testing"
	"time"
)

// TestEngineRemovals: every BlockRemoved and AllBlocksCleared an engine
// reports counts once on its endpoint, and stores do not.
func TestEngineRemovals(t *testing.T) {
	_, tokens, _ := testPrompt(t)
	bs := DefaultBlockSize
	ix := NewIndex(IndexOptions{})
	s, err := NewSubscriber(ix, SubscriberConfig{Endpoint: 3, Addr: "tcp://127.0.0.1:1", Model: testModel, RecoverAfter: time.Minute, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seq := uint64(0)
	send := func(batch any) {
		t.Helper()
		s.handle(ctx, frames(t, seq, batch))
		seq++
	}
	if n := ix.EngineRemovals(3); n != 0 {
		t.Fatalf("an endpoint never seen: %d removals", n)
	}
	send(batchOf(stored([]any{101, 102}, nil, tokens[:2*bs], "GPU")))
	if n := ix.EngineRemovals(3); n != 0 {
		t.Fatalf("after a store: %d removals, want 0", n)
	}
	send(batchOf([]any{"BlockRemoved", []any{102}, "GPU"}))
	send(batchOf([]any{"AllBlocksCleared"}))
	if n := ix.EngineRemovals(3); n != 2 {
		t.Fatalf("after a removal and a clear: %d removals, want 2", n)
	}
	if n := ix.EngineRemovals(2); n != 0 {
		t.Fatalf("another endpoint: %d removals, want 0", n)
	}
}
