package prompt

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/internal/heaptest"
)

// liveHeap is the heap's live bytes after a collection.
func liveHeap() uint64 {
	alloc, _ := heaptest.Live()
	return alloc
}

// sizedBody is a chat body of about kb KiB, the turn-th of a session:
// a system prompt of the session's own (agents of one system prompt share
// memoCandidates entries) and a task, then a short exchange a turn.
func sizedBody(session, kb, turn int) []byte {
	system := fmt.Sprintf("Session %d. ", session) + strings.Repeat("You are a coding agent. Read before you edit. ", 40)
	task := strings.Repeat(fmt.Sprintf("session %d: a line of a tool's result; ", session), kb*1024/44)
	b := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"system","content":%q},{"role":"user","content":%q}`, system, task)
	for i := range turn {
		b = fmt.Appendf(b, `,{"role":"assistant","content":"step %d"},{"role":"user","content":"go on"}`, i)
	}
	return append(b, "]}"...)
}

// TestMemoMemoryBound: the memo's live heap stays within its byte bound
// (and what it counts is what it holds) however many sessions' bodies it
// is given; docs/memory.md quotes the figures it logs:
//
//	go test ./prompt -run TestMemoMemoryBound -v -count=1
func TestMemoMemoryBound(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("measures the heap: not under -race or -short")
	}
	const (
		sessions = 200
		kb       = 200 // a 50k-token prompt
	)
	for _, bound := range []int64{1 << 30, 16 << 20} {
		before := liveHeap()
		m := NewMemo(bound)
		for s := range sessions {
			// A session's first turn leaves a probe, its next the
			// turn's text.
			for turn := range 2 {
				if _, err := m.ParseChat(sizedBody(s, kb, turn)); err != nil {
					t.Fatal(err)
				}
			}
		}
		after := liveHeap()
		st := m.Stats()
		live := int64(after) - int64(before)
		t.Logf("bound %d MiB: %d sessions of %d KiB: counts %.1f MiB in %d entries, live heap %.1f MiB (%.2f× counted)",
			bound>>20, sessions, kb, float64(st.Bytes)/(1<<20), st.Entries, float64(live)/(1<<20), float64(live)/float64(st.Bytes))
		if st.Bytes > bound {
			t.Errorf("memo counts %d bytes, bound %d", st.Bytes, bound)
		}
		if live > st.Bytes*5/4+1<<20 {
			t.Errorf("live heap %d bytes, the memo counts %d: more than 1.25× what it counts", live, st.Bytes)
		}
		runtime.KeepAlive(m)
	}
}
