package turns

import (
	"context"
	"testing"
	"time"
)

// TestDemands: what an autoscaler reads of a pool — its queued turns by
// band, the wait predicted for each band from the turns ahead and the
// pool's hold time, and the replicas that would run it all at the target
// utilization; a pool with no endpoint and turns waiting wants one.
func TestDemands(t *testing.T) {
	c, clock := newTestController(t, Config{})
	pool := newFakeCapacity("p", 2, 4, 0.5) // two replicas of two slots
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acquire := func(band Band) Ticket {
		t.Helper()
		tk, err := c.Acquire(ctx, &Turn{Tenant: "a", Band: band, InputTokens: 100, ExpectedOutputTokens: 10}, pool)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	tickets := []Ticket{acquire(Standard), acquire(Standard), acquire(Standard), acquire(Standard)}
	clock.Advance(10 * time.Second)
	tickets[0].Release(-1) // held 10s: the pool's hold time
	tickets[0] = acquire(Standard)

	// Saturated: what comes now waits.
	pool.set(Measurement{Endpoints: 2, Slots: 4, Saturation: 1})
	for _, b := range []Band{Interactive, Standard, Standard} {
		go c.Acquire(ctx, &Turn{Tenant: "a", Band: b, InputTokens: 100}, pool)
	}
	deadline := time.Now().Add(time.Minute)
	for c.Len() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d turns queued after a minute, want 3", c.Len())
		}
		time.Sleep(time.Millisecond)
	}

	ds := c.Demands()
	if len(ds) != 1 {
		t.Fatalf("demands of %d pools", len(ds))
	}
	d := ds[0]
	if d.Pool != "p" || d.Dispatched != 4 || d.DispatchedTokens != 440 || d.Queued != [numBands]int{1, 2, 0} || d.QueuedTokens != 300 {
		t.Errorf("demand %+v", d)
	}
	// Ahead of an interactive turn: 1 queued; of a standard or background
	// one: 3. Each holds one of 4 slots for 10s.
	if want := [numBands]time.Duration{2500 * time.Millisecond, 7500 * time.Millisecond, 7500 * time.Millisecond}; d.Wait != want {
		t.Errorf("predicted waits %v, want %v", d.Wait, want)
	}
	// 7 turns at 80% of 2 slots a replica: 5 replicas.
	if d.Desired != 5 {
		t.Errorf("desired replicas %d, want 5", d.Desired)
	}

	pool.set(Measurement{})
	if d := c.Demands()[0]; d.Desired != 1 {
		t.Errorf("a pool with no endpoint and turns waiting: desired %d, want 1", d.Desired)
	}
	for _, tk := range tickets {
		tk.Release(-1)
	}
}

// TestDemandsWhileAcquiring: an autoscaler's scrape reads the pools while
// turns are admitted, each Acquire setting its pool's capacity anew; under
// the race detector this fails if Demands reads the capacity unlocked.
func TestDemandsWhileAcquiring(t *testing.T) {
	c, _ := newTestController(t, Config{})
	pool := newFakeCapacity("p", 2, 4, 0.5)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			tk, err := c.Acquire(t.Context(), &Turn{Tenant: "a", Band: Standard, InputTokens: 100}, pool)
			if err != nil {
				t.Error(err)
				return
			}
			tk.Release(-1)
		}
	}()
	for {
		select {
		case <-done:
			if ds := c.Demands(); len(ds) != 1 || ds[0].Pool != "p" || ds[0].Slots != 4 {
				t.Errorf("demands %+v, want pool p's, of 4 slots", ds)
			}
			return
		default:
			c.Demands()
		}
	}
}
