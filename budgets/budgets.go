package budgets

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Per is the period every budget is given for, and refills over.
const Per = time.Minute

// settleTimeout bounds a settlement, which runs as its turn ends.
const settleTimeout = 2 * time.Second

// Options configure a Ledger.
type Options struct {
	// Store holds the budgets; nil: this process's memory.
	Store state.Namespace
	// Now is the clock; nil: time.Now. Gateways sharing a store should
	// keep their clocks in step: a budget's window slides by the clock of
	// whoever draws from it, and never runs back.
	Now func() time.Time
	// Metrics registers the ledger's metrics; nil registers none.
	Metrics prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
}

// Ledger charges turns to their tenants' budgets.
type Ledger struct {
	ns       state.Namespace
	now      func() time.Time
	log      *slog.Logger
	refused  *prometheus.CounterVec
	failures prometheus.Counter
}

// New returns a Ledger over o.Store.
func New(o Options) (*Ledger, error) {
	l := &Ledger{ns: o.Store, now: o.Now, log: o.Logger}
	if l.ns == nil {
		l.ns = state.NewMemory().Namespace("budgets/")
	}
	if l.now == nil {
		l.now = time.Now
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_budget_refusals_total",
		Help: "Turns refused (429) because a tenant's budget of requests or tokens a minute was spent, by tenant and by the budget spent (quota-rpm, quota-tpm).",
	}, []string{"tenant", "reason"})
	l.failures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "turnpike_budget_store_failures_total",
		Help: "Reservations and settlements the state store could not make; the turn went on uncharged.",
	})
	if o.Metrics != nil {
		for _, c := range []prometheus.Collector{l.refused, l.failures} {
			if err := o.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("budgets: %w", err)
			}
		}
	}
	return l, nil
}

// Limits is the state of a turn's budgets as OpenAI's x-ratelimit-*
// headers tell it: for requests and for tokens, the budget a minute, what
// is left of it, and how long until it is whole again. Of several budgets
// of one kind (tenant-wide, the model's), the one with the least left.
type Limits struct {
	Requests, Tokens Limit
}

// Limit is one kind of budget's state; zero when none applies.
type Limit struct {
	Limit, Remaining int64
	Reset            time.Duration
}

// Header names of the rate-limit headers, as OpenAI's.
const (
	HeaderLimitRequests     = "X-Ratelimit-Limit-Requests"
	HeaderRemainingRequests = "X-Ratelimit-Remaining-Requests"
	HeaderResetRequests     = "X-Ratelimit-Reset-Requests"
	HeaderLimitTokens       = "X-Ratelimit-Limit-Tokens"
	HeaderRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	HeaderResetTokens       = "X-Ratelimit-Reset-Tokens"
)

// Set writes the headers of the budgets that apply into h.
func (l *Limits) Set(h http.Header) {
	set := func(limit, remaining, reset string, x *Limit) {
		if x.Limit == 0 {
			return
		}
		h.Set(limit, strconv.FormatInt(x.Limit, 10))
		h.Set(remaining, strconv.FormatInt(x.Remaining, 10))
		h.Set(reset, x.Reset.Round(time.Millisecond).String())
	}
	set(HeaderLimitRequests, HeaderRemainingRequests, HeaderResetRequests, &l.Requests)
	set(HeaderLimitTokens, HeaderRemainingTokens, HeaderResetTokens, &l.Tokens)
}

// OverBudget is a turn refused by its budgets: the *turns.ShedError the
// client is answered with, and the budgets' state for its headers.
type OverBudget struct {
	Shed   *turns.ShedError
	Limits Limits
}

func (e *OverBudget) Error() string { return e.Shed.Error() }

// Unwrap makes errors.As find the ShedError.
func (e *OverBudget) Unwrap() error { return e.Shed }

// Reservation is what a turn was charged. Settle it once.
type Reservation struct {
	l      *Ledger
	draws  [4]state.Draw
	n      int
	cost   int64
	limits Limits
}

// Limits is the state of the turn's budgets after its reservation.
func (r *Reservation) Limits() *Limits { return &r.limits }

// budget kinds, in a budget's key.
const (
	kindRequests = 'r'
	kindTokens   = 't'
)

// key names a budget: its kind, the tenant, and the model for a model's
// budget; NUL-separated, as no name holds a NUL.
func key(kind byte, tenant, model string) []byte {
	k := make([]byte, 0, 3+len(tenant)+len(model))
	k = append(k, kind, 0)
	k = append(k, tenant...)
	if model != "" {
		k = append(k, 0)
		k = append(k, model...)
	}
	return k
}

// Reserve charges a turn of tenant on model, costing cost tokens, to the
// budgets of q: one request and cost tokens from each that applies, all
// or none. It returns nil and no error when no budget applies, and an
// *OverBudget when one is spent. The budgets' state goes to ctx's Note,
// if it has one.
func (l *Ledger) Reserve(ctx context.Context, tenant, model string, q *turns.Quota, cost int64) (*Reservation, error) {
	r := &Reservation{l: l, cost: cost}
	add := func(kind byte, m string, perMinute int64) {
		if perMinute <= 0 {
			return
		}
		size, c := float64(perMinute), 1.0
		if kind == kindTokens {
			c = float64(cost)
		}
		r.draws[r.n] = state.Draw{Key: key(kind, tenant, m), Size: size, Per: Per, Need: math.Min(c, size), Cost: c}
		r.n++
	}
	add(kindRequests, "", int64(q.RequestsPerMinute))
	add(kindTokens, "", q.TokensPerMinute)
	if mq, ok := q.Models[model]; ok {
		add(kindRequests, model, int64(mq.RequestsPerMinute))
		add(kindTokens, model, mq.TokensPerMinute)
	}
	if r.n == 0 {
		return nil, nil
	}
	var levels [4]state.Level
	now := l.now()
	ok, err := l.ns.Draw(ctx, now, r.draws[:r.n], false, levels[:r.n])
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		l.failures.Inc()
		l.log.Warn("budgets: the store could not reserve a turn; it goes on uncharged", "tenant", tenant, "err", err)
		return nil, nil
	}
	r.limits = r.limitsAt(levels[:r.n])
	noteOf(ctx).put(&r.limits)
	if ok {
		return r, nil
	}
	// Refused: for the requests budget first, then the tokens'; the wait
	// is until every budget has what the turn needs.
	se := &turns.ShedError{Status: http.StatusTooManyRequests}
	for i := range r.draws[:r.n] {
		d := &r.draws[i]
		if levels[i].Remaining >= d.Need {
			continue
		}
		if se.Reason == "" || d.Key[0] == kindRequests {
			se.Reason = turns.ReasonQuotaTPM
			if d.Key[0] == kindRequests {
				se.Reason = turns.ReasonQuotaRPM
			}
		}
		se.RetryAfter = max(se.RetryAfter, levels[i].Wait)
	}
	l.refused.WithLabelValues(tenant, se.Reason).Inc()
	return nil, &OverBudget{Shed: se, Limits: r.limits}
}

// limitsAt is the Limits of the draws at levels.
func (r *Reservation) limitsAt(levels []state.Level) Limits {
	var out Limits
	for i := range r.draws[:r.n] {
		d := &r.draws[i]
		x := &out.Tokens
		if d.Key[0] == kindRequests {
			x = &out.Requests
		}
		rem := int64(math.Max(math.Floor(levels[i].Remaining), 0))
		if x.Limit != 0 && rem >= x.Remaining {
			continue
		}
		*x = Limit{Limit: int64(d.Size), Remaining: rem, Reset: levels[i].Reset}
	}
	return out
}

// Settle ends the reservation: a turn that ran (ran) is charged actual
// tokens instead of its estimate (actual < 0 keeps the estimate); one
// that never ran gives its request and tokens back. Settle on a nil
// Reservation does nothing.
func (r *Reservation) Settle(ran bool, actual int64) {
	if r == nil {
		return
	}
	draws := r.draws[:r.n]
	n := 0
	for i := range draws {
		d := &draws[i]
		switch {
		case !ran:
			d.Cost = -d.Cost
		case d.Key[0] == kindTokens && actual >= 0 && actual != r.cost:
			d.Cost = float64(actual - r.cost)
		default:
			continue
		}
		draws[n] = *d
		n++
	}
	if n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	var levels [4]state.Level
	if _, err := r.l.ns.Draw(ctx, r.l.now(), draws[:n], true, levels[:n]); err != nil {
		r.l.failures.Inc()
		r.l.log.Warn("budgets: the store could not settle a turn", "err", err)
	}
}
