package affinity

import (
	"context"
	"testing"

	"github.com/turnpike-gateway/turnpike/pools"
)

// countingPolicy picks the first candidate and counts its picks and the
// outcomes it is told.
type countingPolicy struct {
	name        string
	picks, done int
}

func (c *countingPolicy) Name() string { return c.name }
func (c *countingPolicy) Pick(_ context.Context, _ *Request, cs []*pools.Endpoint) (*pools.Endpoint, error) {
	c.picks++
	return cs[0], nil
}
func (c *countingPolicy) Done(*Request, *pools.Endpoint, Outcome) { c.done++ }

// TestReloadableDoneGoesToThePicker: a policy replaced between a request's
// Pick and its Done is the one told the outcome; the next Pick is the new
// policy's.
func TestReloadableDoneGoesToThePicker(t *testing.T) {
	eps := newFleet(t, 2).Endpoints()
	a, b := &countingPolicy{name: "a"}, &countingPolicy{name: "b"}
	r := NewReloadable(a)
	var req Request
	ep, err := r.Pick(t.Context(), &req, eps)
	if err != nil {
		t.Fatal(err)
	}
	r.Set(b)
	if r.Name() != "b" || !NeedsHashes(r) {
		t.Fatalf("after Set: name %q, needs hashes %v", r.Name(), NeedsHashes(r))
	}
	r.Done(&req, ep, Outcome{})
	if a.done != 1 || b.done != 0 {
		t.Fatalf("Done after the swap: old policy told %d, new %d; want 1, 0", a.done, b.done)
	}
	ep, _ = r.Pick(t.Context(), &req, eps)
	r.Done(&req, ep, Outcome{})
	if a.picks != 1 || b.picks != 1 || b.done != 1 {
		t.Fatalf("picks a %d b %d, b told %d; want 1, 1, 1", a.picks, b.picks, b.done)
	}
}
