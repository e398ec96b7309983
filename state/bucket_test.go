package state_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// testDraw: a budget counts its draws over a sliding window of its
// period, draws all its budgets or none, says how long until a refused
// draw fits, takes a settlement whatever is left, is no key of the
// namespace, and is one budget for every drawer at once.
func testDraw(t *testing.T, db *state.DB) {
	ns := db.Namespace("budgets/")
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0) // on a minute's boundary
	levels := make([]state.Level, 2)
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
			t.Errorf("%s: remaining %v, want %v", what, got, want)
		}
	}
	tokens := func(cost float64) state.Draw {
		return state.Draw{Key: []byte("t/acme"), Size: 600, Per: time.Minute, Need: math.Min(cost, 600), Cost: cost}
	}
	requests := state.Draw{Key: []byte("r/acme"), Size: 2, Per: time.Minute, Need: 1, Cost: 1}

	if !draw(t0, false, tokens(500), requests) {
		t.Fatal("a first draw from unspent budgets was refused")
	}
	near("tokens after 500", levels[0].Remaining, 100)
	near("requests after 1", levels[1].Remaining, 1)
	// 200 more tokens do not fit: neither budget is drawn from. They fit
	// once the window has slid past enough of the 500: into the next
	// minute, by a fifth of it.
	if draw(t0, false, tokens(200), requests) {
		t.Fatal("a draw past the tokens budget was granted")
	}
	near("tokens after a refusal", levels[0].Remaining, 100)
	near("requests after a refusal", levels[1].Remaining, 1)
	if want := 72 * time.Second; levels[0].Wait < want-time.Millisecond || levels[0].Wait > want+time.Millisecond {
		t.Errorf("wait %v, want %v", levels[0].Wait, want)
	}
	if draw(t0.Add(time.Minute), false, tokens(200)) {
		t.Fatal("a draw granted while the window still covers the last minute's 500")
	}
	if !draw(t0.Add(72*time.Second), false, tokens(200), requests) {
		t.Fatal("a draw refused after its wait")
	}
	near("tokens after the wait and 200", levels[0].Remaining, 0)
	near("requests after 2", levels[1].Remaining, 0.2)
	// A settlement takes what the turn used beyond its charge even from a
	// spent budget, and gives back what it did not use, up to the size.
	draw(t0.Add(72*time.Second), true, tokens(50))
	near("tokens settled 50 more", levels[0].Remaining, -50)
	draw(t0.Add(72*time.Second), true, tokens(-10_000))
	near("tokens refunded past the size", levels[0].Remaining, 600)
	// Long idle: unspent again.
	if !draw(t0.Add(time.Hour), false, tokens(600)) {
		t.Fatal("an unspent budget refused its size")
	}
	near("tokens drawn whole", levels[0].Remaining, 0)
	if got := scan(t, ns, state.Range{}); len(got) != 0 {
		t.Errorf("budgets seen by Scan: %v", got)
	}

	// Drawers at once share the budget: of 50 one-token draws from a
	// budget of 20, exactly 20 are granted.
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 50 {
		wg.Go(func() {
			lv := make([]state.Level, 1)
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
		t.Errorf("%d of 50 draws granted from a budget of 20", granted)
	}
}
