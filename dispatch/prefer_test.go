package dispatch

import (
	"testing"
)

// TestAffinityKeepsTurnsOnOneEndpoint: turns that carry an Affinity go to
// the endpoint the first one went to, where round-robin alone would
// alternate; when that endpoint is unavailable they go elsewhere and the
// preference follows them.
func TestAffinityKeepsTurnsOnOneEndpoint(t *testing.T) {
	a, b := newEngine(t, streamOK), newEngine(t, streamOK)
	f := newFixture(t, a, b)
	turn := func(aff *Affinity) string {
		t.Helper()
		ctx := t.Context()
		if aff != nil {
			ctx = WithAffinity(ctx, aff)
		}
		tr, err := f.d.Begin(ctx, chatSpec(false))
		if err != nil {
			t.Fatal(err)
		}
		id := tr.Endpoint().ID
		tr.ReadAll()
		tr.End(nil)
		<-f.probe.outcomes
		return id
	}
	// Without one, round-robin alternates.
	if x, y := turn(nil), turn(nil); x == y {
		t.Fatalf("round-robin sent two turns to %s; the test needs it to alternate", x)
	}
	aff := &Affinity{}
	first := turn(aff)
	if aff.Endpoint() != first {
		t.Fatalf("affinity %q after a turn on %q", aff.Endpoint(), first)
	}
	for i := 0; i < 4; i++ {
		if got := turn(aff); got != first {
			t.Fatalf("turn %d went to %s, want %s", i+2, got, first)
		}
	}
	ep, _ := f.reg.Endpoint(first)
	ep.SetHealthy(false)
	other := turn(aff)
	if other == first {
		t.Fatalf("a turn went to the unhealthy preferred endpoint %s", first)
	}
	if aff.Endpoint() != other {
		t.Errorf("preference %q, want it moved to %q", aff.Endpoint(), other)
	}
	ep.SetHealthy(true)
	if got := turn(aff); got != other {
		t.Errorf("after the move, a turn went to %s, want %s", got, other)
	}
}
