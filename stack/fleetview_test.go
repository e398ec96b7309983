package stack

import (
	"log/slog"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// TestFleetViewDropsPins (issue 34): an endpoint that leaves takes the
// session pins to it along, whether it leaves before the session store is
// built (pins restored at start) or after; other endpoints' pins stay.
func TestFleetViewDropsPins(t *testing.T) {
	index := kv.NewIndex(kv.IndexOptions{})
	v := &fleetView{index: index, metrics: kv.NewCollector(index, nil), log: slog.New(slog.DiscardHandler), groups: map[string]int{}}
	v.mu.subs = map[int]*kv.Subscriber{}
	e0 := &pools.Endpoint{ID: "127.0.0.1:8000", Index: 0}
	e1 := &pools.Endpoint{ID: "127.0.0.1:8001", Index: 1}
	e2 := &pools.Endpoint{ID: "127.0.0.1:8002", Index: 2}

	pins := &sessions.MemPinStore{}
	before := time.Now().Add(-time.Second)
	for key, ep := range map[string]*pools.Endpoint{"a": e0, "b": e1, "c": e2} {
		if err := pins.PutPin(t.Context(), "t", key, ep.ID); err != nil {
			t.Fatal(err)
		}
	}
	v.leave(e0) // before the store exists
	st, err := sessions.NewStore(sessions.Options{Pins: pins})
	if err != nil {
		t.Fatal(err)
	}
	v.setSessions(st)
	if _, err := st.LoadPins(t.Context(), before); err != nil {
		t.Fatal(err)
	}
	v.leave(e1) // after

	now := time.Now()
	for key, want := range map[string]string{"a": "", "b": "", "c": e2.ID} {
		if got, _ := st.Pinned("t", key, now); got != want {
			t.Errorf("session %s pinned to %q, want %q", key, got, want)
		}
	}
}
