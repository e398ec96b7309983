package sessions

import (
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// TestSharedPins: two gateways' stores over one state store, with
// PinRefresh, see each other's pins: a session first routed by one is
// pinned on the other, and a pin moved by the other is adopted once the
// copy here is older than PinRefresh.
func TestSharedPins(t *testing.T) {
	db := state.NewMemory()
	defer db.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { return now }
	const refresh = time.Second
	open := func() *Store { return openShared(t, db, clock, refresh) }
	a, b := open(), open()
	ctx := t.Context()

	if ep, _ := b.Pinned("t", "s", now); ep != "" {
		t.Fatalf("unknown session pinned to %q", ep)
	}
	a.Touch("t", "s", now)
	if err := a.Pin(ctx, "t", "s", "e1", 4, PinNew, now); err != nil {
		t.Fatal(err)
	}
	// b has not seen the session (and its last look found nothing, but
	// a miss is not cached): it reads a's pin.
	if ep, _ := b.Pinned("t", "s", now); ep != "e1" {
		t.Fatalf("b: pinned to %q, want a's e1", ep)
	}
	if st, ok := b.Get("t", "s", now); !ok || st.Endpoint != "e1" {
		t.Errorf("b knows the session as %+v %v", st, ok)
	}

	now = now.Add(10 * time.Millisecond)
	if err := b.Pin(ctx, "t", "s", "e2", 2, PinRescored, now); err != nil {
		t.Fatal(err)
	}
	// a's copy is fresh: it keeps e1 until PinRefresh has passed.
	if ep, blocks := a.Pinned("t", "s", now); ep != "e1" || blocks != 4 {
		t.Fatalf("a before its copy is stale: %q %d, want e1 4", ep, blocks)
	}
	now = now.Add(refresh)
	if ep, blocks := a.Pinned("t", "s", now); ep != "e2" || blocks != 0 {
		t.Fatalf("a after PinRefresh: %q %d, want b's e2 with no prefix known", ep, blocks)
	}
	// a moves it back; b adopts that, and an older pin in the store never
	// overrides a newer one here.
	now = now.Add(10 * time.Millisecond)
	if err := a.Pin(ctx, "t", "s", "e3", 1, PinRescored, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(refresh)
	if ep, _ := b.Pinned("t", "s", now); ep != "e3" {
		t.Fatalf("b: %q, want a's e3", ep)
	}
	if ep, _ := a.Pinned("t", "s", now); ep != "e3" {
		t.Fatalf("a: %q, want its own e3", ep)
	}
}

// TestPinnedSharedCachedNoAllocs: with PinRefresh, a lookup of a copy
// that is still fresh reads nothing and does not allocate.
func TestPinnedSharedCachedNoAllocs(t *testing.T) {
	db := state.NewMemory()
	defer db.Close()
	st, err := NewStore(Options{PinRefresh: time.Hour, Pins: &KVPinStore{Namespace: db.Namespace("m/sessions/")}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	st.Touch("t", "s", now)
	if err := st.Pin(t.Context(), "t", "s", "e1", 1, PinNew, now); err != nil {
		t.Fatal(err)
	}
	st.Pinned("t", "s", now) // reads the store once
	if n := testing.AllocsPerRun(100, func() { st.Pinned("t", "s", now) }); n != 0 {
		t.Errorf("a fresh shared pin lookup allocates %v times", n)
	}
}

// TestSharedUnpin: an unpin on one gateway reaches the others at their
// next look at the store, as a moved pin does, and does not make a session
// a gateway has not seen known there; a pin set after the unpin wins.
func TestSharedUnpin(t *testing.T) {
	db := state.NewMemory()
	defer db.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	const refresh = time.Second
	open := func() *Store { return openShared(t, db, clock, refresh) }
	a, b, c := open(), open(), open()
	ctx := t.Context()
	a.Touch("t", "s", now)
	if err := a.Pin(ctx, "t", "s", "e1", 4, PinNew, now); err != nil {
		t.Fatal(err)
	}
	if ep, _ := b.Pinned("t", "s", now); ep != "e1" {
		t.Fatalf("b: pinned to %q, want a's e1", ep)
	}
	now = now.Add(10 * time.Millisecond)
	if had, err := a.Unpin(ctx, "t", "s", PinRemoved, now); !had || err != nil {
		t.Fatalf("Unpin = %v, %v", had, err)
	}
	now = now.Add(refresh)
	if ep, blocks := b.Pinned("t", "s", now); ep != "" || blocks != 0 {
		t.Fatalf("b after a's unpin: %q %d, want unpinned", ep, blocks)
	}
	if ep, _ := c.Pinned("t", "s", now); ep != "" {
		t.Fatalf("c, which never saw the session: %q", ep)
	}
	if _, ok := c.Get("t", "s", now); ok {
		t.Error("an unpin made the session known to a gateway that never served it")
	}
	now = now.Add(10 * time.Millisecond)
	if err := b.Pin(ctx, "t", "s", "e2", 1, PinNew, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(refresh)
	if ep, _ := a.Pinned("t", "s", now); ep != "e2" {
		t.Fatalf("a after b pinned again: %q, want e2", ep)
	}
}

// openShared is one gateway's session store over db's pins, as with Redis
// state: reading other gateways' pins once its copy is older than refresh.
func openShared(t *testing.T, db *state.DB, clock func() time.Time, refresh time.Duration) *Store {
	t.Helper()
	st, err := NewStore(Options{PinRefresh: refresh, Pins: &KVPinStore{Namespace: db.Namespace("m/sessions/"), Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
