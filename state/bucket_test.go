package state_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// testDraw: a token bucket starts full, draws all its buckets or none,
// refills with time up to its size, takes a settlement whatever it holds,
// is no key of the namespace, and is one bucket for every drawer at once.
func testDraw(t *testing.T, db *state.DB) {
	ns := db.Namespace("budgets/")
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0)
	levels := make([]float64, 2)
	draw := func(now time.Time, force bool, ds ...state.Draw) bool {
		t.Helper()
		ok, err := ns.Draw(ctx, now, ds, force, levels)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s: level %v, want %v", what, got, want)
		}
	}
	tokens := func(cost float64) state.Draw {
		return state.Draw{Key: []byte("t/acme"), Size: 600, Per: time.Minute, Need: math.Min(cost, 600), Cost: cost}
	}
	requests := state.Draw{Key: []byte("r/acme"), Size: 2, Per: time.Minute, Need: 1, Cost: 1}

	if !draw(t0, false, tokens(500), requests) {
		t.Fatal("a first draw from full buckets was refused")
	}
	near("tokens after 500", levels[0], 100)
	near("requests after 1", levels[1], 1)
	// 200 more tokens do not fit: neither bucket is drawn from.
	if draw(t0, false, tokens(200), requests) {
		t.Fatal("a draw past the tokens bucket's level was granted")
	}
	near("tokens after a refusal", levels[0], 100)
	near("requests after a refusal", levels[1], 1)
	// Ten seconds refill 100 of 600 a minute.
	if !draw(t0.Add(10*time.Second), false, tokens(200), requests) {
		t.Fatal("a draw that fits after the refill was refused")
	}
	near("tokens after the refill and 200", levels[0], 0)
	near("requests after 2 and the refill", levels[1], 1.0/3)
	// A settlement takes what the turn used beyond its charge even from
	// an empty bucket, and gives back what it did not use, up to the size.
	draw(t0.Add(10*time.Second), true, tokens(50))
	near("tokens settled 50 more", levels[0], -50)
	draw(t0.Add(10*time.Second), true, tokens(-10_000))
	near("tokens refunded past the size", levels[0], 600)
	// A clock that runs back adds nothing.
	draw(t0, true, tokens(0))
	near("tokens, the clock gone back", levels[0], 600)
	// Long idle: full again, never past.
	if !draw(t0.Add(time.Hour), false, tokens(600)) {
		t.Fatal("a full bucket refused its size")
	}
	near("tokens drawn whole", levels[0], 0)
	if got := scan(t, ns, state.Range{}); len(got) != 0 {
		t.Errorf("buckets seen by Scan: %v", got)
	}

	// Drawers at once share the bucket: of 50 one-token draws from a
	// bucket of 20, exactly 20 are granted.
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 50 {
		wg.Go(func() {
			lv := make([]float64, 1)
			ok, err := ns.Draw(ctx, t0, []state.Draw{{Key: []byte("shared"), Size: 20, Per: time.Minute, Need: 1, Cost: 1}}, false, lv)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if granted != 20 {
		t.Errorf("%d of 50 draws granted from a bucket of 20", granted)
	}
}
