package responses

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestContextCacheBound: the context cache holds at most
// Config.ContextCacheBytes however many chains end on the gateway, the
// least recently ended going first, and a negative bound keeps none.
func TestContextCacheBound(t *testing.T) {
	const bound = 64 << 10
	eng := &fakeEngine{}
	svc, _ := newTestService(t, eng)
	svc.contexts = newContextCache(bound)
	ctx := context.Background()
	text := strings.Repeat("a long tool result ", 400) // 7.6 KB
	var last string
	for i := range 40 {
		// A chain is cached from its second turn on.
		first, err := svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","input":"%d %s"}`, i, text)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","previous_response_id":%q,"input":"%s"}`, first.ID, text)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		last = resp.ID
		svc.contexts.mu.Lock()
		n, cost := svc.contexts.mu.entries.Len(), svc.contexts.mu.entries.Cost()
		svc.contexts.mu.Unlock()
		if cost > bound {
			t.Fatalf("after %d chains the cache holds %d bytes in %d entries, bound %d", i+1, cost, n, bound)
		}
		if n == 0 {
			t.Fatalf("after %d chains the cache holds nothing", i+1)
		}
	}
	svc.contexts.mu.Lock()
	_, newest := svc.contexts.mu.entries.Peek(last)
	n := svc.contexts.mu.entries.Len()
	svc.contexts.mu.Unlock()
	if !newest || n >= 40 {
		t.Errorf("the cache holds %d of 40 contexts, the last ended held: %v; want fewer, the last among them", n, newest)
	}
	if newContextCache(-1) != nil || newContextCache(0) != nil {
		t.Error("a bound of 0 or less makes a cache")
	}
	cfg := Config{}
	cfg.EnsureDefaults()
	if cfg.ContextCacheBytes != DefaultContextCacheBytes {
		t.Errorf("default ContextCacheBytes %d, want %d", cfg.ContextCacheBytes, DefaultContextCacheBytes)
	}
}
