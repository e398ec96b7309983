package budgets_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/budgets"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
	"github.com/turnpike-gateway/turnpike/turns"
)

// clock is a test's clock, moved by hand.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func newClock(t time.Time) *clock    { c := &clock{}; c.ns.Store(t.UnixNano()); return c }
func ledger(t *testing.T, ns state.Namespace, c *clock) *budgets.Ledger {
	t.Helper()
	l, err := budgets.New(budgets.Options{Store: ns, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestTwoGatewaysShareABudget: a tenant with 10k
// tokens a minute sends 30k a minute for two minutes, its turns taking
// turns between two gateways on one Redis: 10k ± 5% of them go through
// each minute, and every other turn is refused with a Retry-After.
func TestTwoGatewaysShareABudget(t *testing.T) {
	srv := redistest.Start(t)
	c := newClock(time.Unix(1_800_000_000, 0))
	var gateways [2]*budgets.Ledger
	for i := range gateways {
		db, err := state.OpenRedis(context.Background(), srv.URL(), state.RedisOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		gateways[i] = ledger(t, db.Namespace("m/budgets/"), c)
	}
	q := &turns.Quota{TokensPerMinute: 10_000}
	const cost = 500 // 60 turns a minute: 30k tokens
	var through [2]int64
	ctx := context.Background()
	for n := range 120 {
		r, err := gateways[n%2].Reserve(ctx, "acme", "m", q, cost)
		switch {
		case err == nil:
			through[n/60] += cost
			r.Settle(true, cost)
		default:
			var ob *budgets.OverBudget
			ok := errors.As(err, &ob)
			if !ok || ob.Shed.Status != http.StatusTooManyRequests || ob.Shed.Reason != turns.ReasonQuotaTPM || ob.Shed.RetryAfter <= 0 {
				t.Fatalf("turn %d: %v", n, err)
			}
			if ob.Limits.Tokens.Limit != 10_000 || ob.Limits.Tokens.Remaining >= cost {
				t.Fatalf("turn %d refused with %+v", n, ob.Limits.Tokens)
			}
		}
		c.add(time.Second)
	}
	t.Logf("tokens through, minute by minute: %v", through)
	for m, got := range through {
		if got < 9_500 || got > 10_500 {
			t.Errorf("minute %d: %d tokens through, want 10,000 ± 5%%", m+1, got)
		}
	}
}

// TestReservationSettles: a turn that ran is charged what it used, not its
// estimate; one that never ran gives its request and tokens back; the
// headers say what is left.
func TestReservationSettles(t *testing.T) {
	c := newClock(time.Unix(1_800_000_000, 0))
	l := ledger(t, nil, c)
	q := &turns.Quota{RequestsPerMinute: 10, TokensPerMinute: 1_000, Models: map[string]turns.ModelQuota{"big": {TokensPerMinute: 300}}}
	ctx := context.Background()

	r, err := l.Reserve(ctx, "acme", "small", q, 400)
	if err != nil {
		t.Fatal(err)
	}
	if lim := r.Limits(); lim.Tokens.Remaining != 600 || lim.Requests.Remaining != 9 || lim.Requests.Limit != 10 {
		t.Errorf("after a reservation of 400: %+v", *lim)
	}
	r.Settle(true, 100) // it used 100
	r, err = l.Reserve(ctx, "acme", "small", q, 0)
	if err != nil {
		t.Fatal(err)
	}
	if lim := r.Limits(); lim.Tokens.Remaining != 900 || lim.Requests.Remaining != 8 {
		t.Errorf("after settling on 100 used: %+v", *lim)
	}
	r.Settle(false, -1) // never ran: its request back
	// The model's own budget is the tighter: it names the headers, and
	// refuses what the tenant's would let through.
	r, err = l.Reserve(ctx, "acme", "big", q, 200)
	if err != nil {
		t.Fatal(err)
	}
	if lim := r.Limits(); lim.Tokens.Limit != 300 || lim.Tokens.Remaining != 100 || lim.Requests.Remaining != 8 {
		t.Errorf("on the model with a budget: %+v", *lim)
	}
	_, err = l.Reserve(ctx, "acme", "big", q, 200)
	var se *turns.ShedError
	if !errors.As(err, &se) || se.Reason != turns.ReasonQuotaTPM {
		t.Fatalf("over the model's budget: %v", err)
	}
	h := http.Header{}
	var ob *budgets.OverBudget
	errors.As(err, &ob)
	ob.Limits.Set(h)
	if h.Get("x-ratelimit-limit-tokens") != "300" || h.Get("x-ratelimit-remaining-tokens") != "100" || h.Get("x-ratelimit-limit-requests") != "10" || h.Get("x-ratelimit-reset-tokens") == "" {
		t.Errorf("headers of the refusal: %v", h)
	}
	// Another tenant's budgets are its own; no budget, no reservation.
	if r, err := l.Reserve(ctx, "other", "big", &turns.Quota{}, 1<<20); r != nil || err != nil {
		t.Errorf("no budget: %v %v", r, err)
	}
}

// TestBudgetsRefuse: a budget of requests and one of tokens a minute each
// refuse the turn that would overspend them with a 429 naming it and a
// Retry-After of when it fits; a turn dearer than a whole minute fits
// only an unspent budget.
func TestBudgetsRefuse(t *testing.T) {
	c := newClock(time.Unix(1_800_000_000, 0)) // on a minute's boundary
	l := ledger(t, nil, c)
	ctx := context.Background()
	refused := func(what string, err error, reason string, retryAfter time.Duration) {
		t.Helper()
		var ob *budgets.OverBudget
		ok := errors.As(err, &ob)
		if !ok || ob.Shed.Reason != reason || ob.Shed.Status != http.StatusTooManyRequests ||
			ob.Shed.RetryAfter < retryAfter-time.Millisecond || ob.Shed.RetryAfter > retryAfter+time.Millisecond {
			t.Errorf("%s: %v, want %s with Retry-After %v", what, err, reason, retryAfter)
		}
	}
	granted := func(what string) func(*budgets.Reservation, error) *budgets.Reservation {
		return func(r *budgets.Reservation, err error) *budgets.Reservation {
			t.Helper()
			if err != nil || r == nil {
				t.Fatalf("%s: %v", what, err)
			}
			return r
		}
	}

	// Two requests a minute: the third waits for the window to slide past
	// half of the first minute's two (90s); the same at 1m30s fits.
	rpm := &turns.Quota{RequestsPerMinute: 2}
	granted("r1")(l.Reserve(ctx, "rpm", "m", rpm, 10))
	granted("r2")(l.Reserve(ctx, "rpm", "m", rpm, 10))
	_, err := l.Reserve(ctx, "rpm", "m", rpm, 10)
	refused("r3", err, turns.ReasonQuotaRPM, 90*time.Second)
	c.add(time.Minute)
	_, err = l.Reserve(ctx, "rpm", "m", rpm, 10)
	refused("r4 a minute on", err, turns.ReasonQuotaRPM, 30*time.Second)
	c.add(30 * time.Second)
	granted("r5 after its wait")(l.Reserve(ctx, "rpm", "m", rpm, 10))

	// A thousand tokens a minute: charged input and expected output, and
	// corrected to what the turn used when it ends.
	tpm := &turns.Quota{TokensPerMinute: 1000}
	k1 := granted("k1")(l.Reserve(ctx, "tpm", "m", tpm, 800))
	_, err = l.Reserve(ctx, "tpm", "m", tpm, 300)
	// 30s into a minute: the rest of it, then an eighth of the next, when
	// the 800 weigh 700.
	refused("k2", err, turns.ReasonQuotaTPM, 30*time.Second+7500*time.Millisecond)
	k1.Settle(true, 500)
	granted("k3 after k1 used 500 of its 800")(l.Reserve(ctx, "tpm", "m", tpm, 300))
	c.add(2 * time.Minute)
	granted("k4, dearer than the minute, on an unspent budget")(l.Reserve(ctx, "tpm", "m", tpm, 5000))
	_, err = l.Reserve(ctx, "tpm", "m", tpm, 1)
	refused("k5 after k4", err, turns.ReasonQuotaTPM, 30*time.Second+time.Duration(float64(time.Minute)*(1-999.0/5000)))
}
