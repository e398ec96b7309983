package hf

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/internal/heaptest"
)

// TestIncrementalMemory: the token cache's live heap is what it counts, 4
// bytes a token and a little a session, so its byte bound bounds its
// memory; docs/memory.md quotes the figures it logs:
//
//	go test ./prompt/hf -run TestIncrementalMemory -v -count=1
func TestIncrementalMemory(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("measures the heap: not under -race or -short")
	}
	const sessions = 100
	tok := qwen(t).Tokenizer
	liveHeap := func() uint64 {
		alloc, _ := heaptest.Live()
		return alloc
	}
	tokens := 0
	before := liveHeap()
	inc := NewIncremental(tok, 1<<30)
	for s := range sessions {
		// About 200 KB of text, 59k tokens.
		text := strings.Repeat(fmt.Sprintf("session %d reads a line of a tool's result. ", s), 4600)
		tokens += len(inc.Encode(nil, fmt.Sprint("session-", s), text))
	}
	after := liveHeap()
	live := int64(after) - int64(before)
	counted := inc.Bytes()
	t.Logf("%d sessions, %d tokens each: counts %.1f MiB, live heap %.1f MiB (%.2f× counted), %.2f B a token",
		sessions, tokens/sessions, float64(counted)/(1<<20), float64(live)/(1<<20), float64(live)/float64(counted), float64(live)/float64(tokens))
	if live > counted*5/4+1<<20 {
		t.Errorf("live heap %d bytes, the cache counts %d: more than 1.25× what it counts", live, counted)
	}
	runtime.KeepAlive(inc)
}
