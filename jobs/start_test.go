package jobs

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/jobs/jobstest"
	"github.com/turnpike-gateway/turnpike/state"
)

// TestStartRunsTheLoops: a started queue renews its leases every third of
// a lease on its clock, and takes over free pending work every half.
func TestStartRunsTheLoops(t *testing.T) {
	db := state.NewMemory()
	t.Cleanup(func() { db.Close() })
	clock := jobstest.NewClock()
	ns := jobstest.NewLeases(db.Namespace("w/"), clock)
	const lease = 30 * time.Second
	adopted := make(chan string, 1)
	var mu sync.Mutex
	pending := []string{"w0"}
	q, err := New(Options[int]{
		Namespace: ns, Keys: keys, Holder: "a", Lease: lease, Clock: clock,
		Pending: func(context.Context) ([]string, error) { mu.Lock(); defer mu.Unlock(); return pending, nil },
		Adopt:   func(_ context.Context, id string, _ bool) { adopted <- id },
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(context.Background()) })
	if id := <-adopted; id != "w0" {
		t.Fatalf("Start adopted %s, want w0", id)
	}
	mu.Lock()
	pending = nil
	mu.Unlock()
	stop := make(chan struct{})
	q.mu.Lock()
	q.mu.taking["w1"] = struct{}{}
	q.mu.Unlock()
	if ok, _ := ns.Lease(t.Context(), []byte("l/w1"), "a", lease); !ok {
		t.Fatal("leasing w1")
	}
	q.Run("w1", 0, func(ctx context.Context, _ *Job[int]) {
		select {
		case <-stop:
		case <-ctx.Done():
		}
	})
	defer close(stop)
	// The loops wait on the clock: each move wakes the renewal.
	// The three loops (renewals, cancels, scans) each wait on the clock
	// between rounds.
	waiting := func() bool { return clock.Waiters() == 3 }
	for range 4 {
		waitFor(t, waiting)
		clock.Advance(lease / 3)
		waitFor(t, func() bool { return ns.RenewedNow("l/w1", "a", lease) })
	}
	mu.Lock()
	pending = []string{"w2"}
	mu.Unlock()
	waitFor(t, waiting)
	clock.Advance(lease / 2)
	select {
	case id := <-adopted:
		if id != "w2" {
			t.Fatalf("the scan adopted %s, want w2", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no scan adopted w2 half a lease on")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}
