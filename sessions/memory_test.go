package sessions

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/internal/heaptest"
)

// TestStoreMemory: a session costs the store a few hundred bytes however
// long its prompts (it keeps no prompt), and the store holds at most
// MaxSessions; docs/memory.md quotes the figure it logs:
//
//	go test ./sessions -run TestStoreMemory -v -count=1
func TestStoreMemory(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("measures the heap: not under -race or -short")
	}
	const (
		sessions = 100_000
		max      = 50_000
	)
	liveHeap := func() uint64 {
		alloc, _ := heaptest.Live()
		return alloc
	}
	keys := make([]string, sessions)
	for i := range keys {
		// A key as long as derive.go keeps one.
		keys[i] = fmt.Sprintf("%0*d", MaxKeyLen, i)
	}
	before := liveHeap()
	s, err := NewStore(Options{MaxSessions: max})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, k := range keys {
		s.Touch("tenant", k, now)
		if err := s.Pin(context.Background(), "tenant", k, "endpoint-1", 3000, PinNew, now); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 0 && s.Len() > max {
			t.Fatalf("store holds %d sessions, MaxSessions %d", s.Len(), max)
		}
	}
	after := liveHeap()
	n := s.Len()
	if n > max {
		t.Fatalf("store holds %d sessions, MaxSessions %d", n, max)
	}
	// The keys are the caller's strings, shared with the store; a
	// request's key is its own, so count them in.
	perSession := (float64(after)-float64(before))/float64(n) + MaxKeyLen
	t.Logf("%d sessions held of %d touched (MaxSessions %d): %.0f B a session with a %d-byte key",
		n, sessions, max, perSession, MaxKeyLen)
	if perSession > 800 {
		t.Errorf("%.0f B a session, want ≤ 800", perSession)
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(keys)
}
