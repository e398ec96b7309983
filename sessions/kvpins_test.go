package sessions

import (
	"context"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// pinSpace is the sessions namespace of an in-memory state store.
func pinSpace(t *testing.T) state.Namespace {
	db := state.NewMemory()
	t.Cleanup(func() { db.Close() })
	return db.Namespace("m/sessions/")
}

// TestKVPinStoreSurvivesRestart: pins written through one Store come back
// in a new Store over the same namespace, and an unpin is durable too.
func TestKVPinStoreSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	ps := &KVPinStore{Namespace: pinSpace(t), Clock: func() time.Time { return now }}
	async := NewAsyncPinStore(ps, 0, func(err error) { t.Error(err) })
	async.Start(context.Background())
	s1, err := NewStore(Options{Pins: async})
	if err != nil {
		t.Fatal(err)
	}
	s1.Touch("acme", "sess-1", now)
	s1.Touch("acme", "sess-2", now)
	s1.Touch("other", "sess-1", now)
	for _, p := range []struct{ tenant, key, ep string }{{"acme", "sess-1", "10.0.0.1:8000"}, {"acme", "sess-2", "10.0.0.2:8000"}, {"other", "sess-1", "10.0.0.3:8000"}} {
		if err := s1.Pin(ctx, p.tenant, p.key, p.ep, 4, PinNew, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s1.Unpin(ctx, "acme", "sess-2", PinRemoved, now); err != nil {
		t.Fatal(err)
	}
	async.Close(context.Background()) // the gateway closes it at shutdown: every queued pin is written

	s2, err := NewStore(Options{Pins: ps})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s2.LoadPins(ctx, now.Add(time.Minute)); err != nil || n != 2 {
		t.Fatalf("LoadPins = %d, %v; want 2 pins", n, err)
	}
	for _, c := range []struct{ tenant, key, want string }{{"acme", "sess-1", "10.0.0.1:8000"}, {"acme", "sess-2", ""}, {"other", "sess-1", "10.0.0.3:8000"}} {
		if ep, _ := s2.Pinned(c.tenant, c.key, now.Add(time.Minute)); ep != c.want {
			t.Errorf("%s/%s pinned to %q after restart, want %q", c.tenant, c.key, ep, c.want)
		}
	}
}

// TestSweepCollectsPins: a session forgotten for age takes its durable pin
// with it, so the pin namespace does not grow with every session ever seen.
func TestSweepCollectsPins(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	ps := &KVPinStore{Namespace: pinSpace(t), Clock: func() time.Time { return now }}
	s, err := NewStore(Options{Pins: ps, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Touch("acme", "old", now)
	s.Pin(ctx, "acme", "old", "ep-1", 2, PinNew, now)
	s.Touch("acme", "fresh", now.Add(50*time.Minute))
	s.Pin(ctx, "acme", "fresh", "ep-2", 2, PinNew, now.Add(50*time.Minute))
	if n := s.Sweep(now.Add(90 * time.Minute)); n != 1 {
		t.Fatalf("swept %d sessions, want 1", n)
	}
	pins, _ := ps.LoadPins(ctx)
	if len(pins) != 1 || pins[0].Key != "fresh" {
		t.Fatalf("durable pins after sweep: %+v, want only the fresh one", pins)
	}
	// An unpin's record goes with its session too.
	if _, err := s.Unpin(ctx, "acme", "fresh", PinRemoved, now.Add(60*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := s.Sweep(now.Add(200 * time.Minute)); n != 1 {
		t.Fatalf("swept %d sessions, want 1", n)
	}
	if pins, _ := ps.LoadPins(ctx); len(pins) != 0 {
		t.Fatalf("durable pins after the unpinned session's sweep: %+v, want none", pins)
	}
}

// TestLoadPinsCollectsExpired: pins older than the TTL are dropped from
// the store at load, not only skipped.
func TestLoadPinsCollectsExpired(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	ps := &KVPinStore{Namespace: pinSpace(t), Clock: func() time.Time { return now }}
	ps.PutPin(ctx, "acme", "ancient", "ep-1")
	s, err := NewStore(Options{Pins: ps, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := s.LoadPins(ctx, now.Add(2*time.Hour)); n != 0 {
		t.Fatalf("loaded %d expired pins", n)
	}
	if pins, _ := ps.LoadPins(ctx); len(pins) != 0 {
		t.Fatalf("expired pin left in the store: %+v", pins)
	}
}
