package dispatch

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGate: requests that cannot be Interactive take the gate's one
// slot in turn, Begin gives it back as the turn enters admission, and an
// Interactive request passes while it is taken.
func TestGate(t *testing.T) {
	e := newEngine(t, streamOK)
	f := newFixture(t, e)
	d, err := New(Options{Registry: f.reg, Policy: f.probe, Flow: f.flow, GateSlots: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	none, interactive := http.Header{}, http.Header{PriorityHeader: {"interactive"}}

	// acme's bands stop at Standard, whatever its header asks.
	held, leaveHeld, err := d.Enter(ctx, "acme", interactive)
	if err != nil {
		t.Fatal(err)
	}
	// A tenant without bands of its own asking for Interactive passes.
	if _, leave, err := d.Enter(ctx, "other", interactive); err != nil {
		t.Fatal(err)
	} else {
		leave()
	}
	waitFor := func(n float64) {
		t.Helper()
		for testutil.ToFloat64(d.gate.waiting) != n {
			if ctx.Err() != nil {
				t.Fatalf("waiting %v, want %v", testutil.ToFloat64(d.gate.waiting), n)
			}
			time.Sleep(time.Millisecond)
		}
	}

	// The same tenant without a header is Standard: it waits for the slot.
	entered := make(chan func(), 1)
	go func() {
		_, leave, err := d.Enter(ctx, "other", none)
		if err != nil {
			t.Error(err)
			leave = func() {}
		}
		entered <- leave
	}()
	waitFor(1)
	select {
	case <-entered:
		t.Fatal("a second request took the one slot")
	default:
	}
	// Begin gives the slot back as its turn enters admission.
	tr, err := d.Begin(held, chatSpec(true))
	if err != nil {
		t.Fatal(err)
	}
	var leave func()
	select {
	case leave = <-entered:
	case <-ctx.Done():
		t.Fatal("the slot was not given back as the turn entered admission")
	}
	waitFor(0)
	tr.ReadAll()
	tr.End(nil)
	<-f.probe.outcomes
	leaveHeld() // after Begin's: gives nothing back twice

	// The slot is the second request's: a third waits, and gives up when
	// its client goes.
	gone, goneCancel := context.WithCancelCause(ctx)
	errc := make(chan error, 1)
	go func() {
		_, _, err := d.Enter(gone, "acme", none)
		errc <- err
	}()
	waitFor(1)
	cause := errors.New("client gone")
	goneCancel(cause)
	if err := <-errc; !errors.Is(err, cause) {
		t.Errorf("a waiter whose client went: %v", err)
	}
	waitFor(0)
	leave()
	leave()
	if len(d.gate.slots) != 0 {
		t.Errorf("%d slots taken after every request left", len(d.gate.slots))
	}
	if n := testutil.CollectAndCount(d.gate.waits); n != 1 {
		t.Errorf("wait histogram: %d series", n)
	}
}
