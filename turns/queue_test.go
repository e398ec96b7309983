package turns

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// queueFixture pushes turns straight into a poolQueue, without a Controller.
type queueFixture struct {
	cfg FlowControl
	pq  *poolQueue
	seq uint64
}

func newQueueFixture() *queueFixture {
	f := &queueFixture{pq: newPoolQueue("p")}
	f.cfg.EnsureDefaults()
	return f
}

func (f *queueFixture) push(ts *tenantState, band Band, session string, cost int64) *waiter {
	f.seq++
	w := &waiter{band: band, cost: cost, seq: f.seq, tenant: ts, turn: Turn{Tenant: ts.name, SessionKey: session}}
	f.pq.push(w, f.cfg.PriorityCredit)
	return w
}

func (f *queueFixture) backlogged(ts *tenantState, band Band) bool {
	tf := f.pq.bands[band.index()].flows[ts]
	return tf != nil && tf.heapIdx >= 0
}

func (f *queueFixture) pop() *waiter { return f.pq.pop(f.pq.pickBand(true, true, true), &f.cfg) }

func TestFairQueueTenantWeights(t *testing.T) {
	for _, tc := range []struct {
		name       string
		wa, wb     float64
		sessionsA  int
		costA      [2]int64 // uniform range of a turn's cost
		costB      [2]int64
		wantRatioA float64 // a's share of dispatched tokens over b's
	}{
		{name: "3:1 equal costs", wa: 3, wb: 1, sessionsA: 1, costA: [2]int64{100, 100}, costB: [2]int64{100, 100}, wantRatioA: 3},
		{name: "3:1 mixed costs", wa: 3, wb: 1, sessionsA: 1, costA: [2]int64{50, 4000}, costB: [2]int64{50, 4000}, wantRatioA: 3},
		{name: "3:1 small turns against large", wa: 3, wb: 1, sessionsA: 8, costA: [2]int64{10, 200}, costB: [2]int64{2000, 8000}, wantRatioA: 3},
		{name: "1:1 many sessions against one", wa: 1, wb: 1, sessionsA: 50, costA: [2]int64{100, 1000}, costB: [2]int64{100, 1000}, wantRatioA: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newQueueFixture()
			rng := rand.New(rand.NewPCG(7, 11))
			cost := func(r [2]int64) int64 { return r[0] + rng.Int64N(r[1]-r[0]+1) }
			a := &tenantState{name: "a", weight: tc.wa}
			b := &tenantState{name: "b", weight: tc.wb}
			const backlog = 4000
			for i := range backlog {
				f.push(a, Standard, string(rune('A'+i%tc.sessionsA)), cost(tc.costA))
				f.push(b, Standard, "b", cost(tc.costB))
			}
			var tokens = map[*tenantState]int64{}
			// Dispatch while both stay backlogged.
			for f.backlogged(a, Standard) && f.backlogged(b, Standard) {
				w := f.pop()
				tokens[w.tenant] += w.cost
			}
			got := float64(tokens[a]) / float64(tokens[b])
			if math.Abs(got-tc.wantRatioA)/tc.wantRatioA > 0.10 {
				t.Fatalf("a:b dispatched tokens = %d:%d = %.3f, want %.1f within 10%%", tokens[a], tokens[b], got, tc.wantRatioA)
			}
		})
	}
}

func TestFairQueueSessionsShareByTokens(t *testing.T) {
	f := newQueueFixture()
	a := &tenantState{name: "a", weight: 1}
	for range 1000 {
		f.push(a, Standard, "big", 1000)
		f.push(a, Standard, "small", 100)
	}
	tokens := map[string]int64{}
	for range 500 {
		w := f.pop()
		tokens[w.turn.SessionKey] += w.cost
	}
	if r := float64(tokens["big"]) / float64(tokens["small"]); math.Abs(r-1) > 0.10 {
		t.Fatalf("big:small = %v, want 1:1 by tokens within 10%%", tokens)
	}
}

func TestFairQueueIdleTenantBanksNoCredit(t *testing.T) {
	f := newQueueFixture()
	a := &tenantState{name: "a", weight: 1}
	b := &tenantState{name: "b", weight: 1}
	for range 100 {
		f.push(a, Standard, "", 100)
	}
	for range 50 {
		f.pop()
	}
	// b arrives after a has had 50 turns alone; it gets its share from now
	// on, not 50 turns of catch-up.
	for range 100 {
		f.push(b, Standard, "", 100)
	}
	n := map[string]int{}
	for range 20 {
		n[f.pop().tenant.name]++
	}
	if n["a"] < 9 || n["b"] > 11 {
		t.Fatalf("after b joined: %v, want about 10 each", n)
	}
}

func TestFairQueueRemoveKeepsOrder(t *testing.T) {
	f := newQueueFixture()
	a := &tenantState{name: "a", weight: 1}
	var ws []*waiter
	for i := range 10 {
		ws = append(ws, f.push(a, Standard, string(rune('a'+i%3)), int64(100+i)))
	}
	f.pq.remove(ws[4], f.cfg.PriorityCredit)
	f.pq.remove(ws[0], f.cfg.PriorityCredit)
	seen := map[*waiter]bool{}
	for f.pq.queued > 0 {
		w := f.pop()
		if w == ws[4] || w == ws[0] || seen[w] {
			t.Fatalf("popped removed or repeated turn %d", w.seq)
		}
		seen[w] = true
	}
	if len(seen) != 8 {
		t.Fatalf("popped %d turns, want 8", len(seen))
	}
	bq := &f.pq.bands[Standard.index()]
	if bq.head != nil || bq.tail != nil || bq.count != 0 || bq.tokens != 0 || bq.tenants.Len() != 0 {
		t.Fatalf("band not empty after draining: %+v", bq)
	}
}

// TestControllerConcurrent runs many goroutines through Acquire and Release,
// some cancelling, and checks that everything is given back.
func TestControllerConcurrent(t *testing.T) {
	c, err := New(Config{
		FlowControl: FlowControl{Bands: BandsConfig{Background: BandConfig{TTL: 20 * time.Millisecond}}, TickInterval: time.Millisecond},
		Tenants:     []Tenant{{Name: "a", Weight: 3}, {Name: "b"}},
	}, WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	c.Start(context.Background())
	pool := newFakeCapacity("p", 1, 4, 0.5)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 200 {
				turn := &Turn{Tenant: []string{"a", "b", "c"}[i%3], Band: Bands[rng.IntN(numBands)], SessionKey: string(rune('a' + rng.IntN(5))), InputTokens: 1 + rng.IntN(1000)}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
				tk, err := c.Acquire(ctx, turn, pool)
				cancel()
				if err == nil {
					tk.Release(rng.IntN(2000) - 1)
				}
			}
		}()
	}
	wg.Wait()
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, pq := range c.mu.pools {
		if pq.queued != 0 || pq.dispatched != 0 || pq.lentDispatched != 0 {
			t.Errorf("pool %s: queued %d, dispatched %d after all released", name, pq.queued, pq.dispatched)
		}
	}
	for name, ts := range c.mu.tenants {
		if ts.held != 0 || ts.heldTokens != 0 {
			t.Errorf("tenant %s: held %d, %d tokens after all released", name, ts.held, ts.heldTokens)
		}
	}
	if c.mu.heldTokens != 0 || c.mu.activeWeight != 0 {
		t.Errorf("held tokens %d, active weight %g after all released", c.mu.heldTokens, c.mu.activeWeight)
	}
}
