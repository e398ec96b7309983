package pools

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrReclaimed is the cause of a lent request cut because its pool was
// reclaimed and the reclaim's deadline passed. Client.Send wraps it in
// ErrUpstream, so that dispatch retries a request not yet answered on
// another endpoint and moves a stream already under way (see
// Options.MaxMigrations).
var ErrReclaimed = errors.New("pools: the lent pool was reclaimed and its deadline passed")

// maxCutLead bounds how long before a reclaim's deadline lent work is
// cut: a quarter of the time the reclaim gave, at most this. The deadline
// is when the pool must be free; an engine drops a cut request at its next
// step, so the cut comes a little early.
const maxCutLead = 500 * time.Millisecond

// cutAt is when lent work in flight under l is cut, given when the
// deadline was set.
func cutAt(l Lease, set time.Time) time.Time {
	deadline := l.Deadline()
	if deadline.IsZero() {
		return deadline
	}
	return deadline.Add(-min(maxCutLead, max(deadline.Sub(set), 0)/4))
}

// DefaultReclaimGrace is how long lent work in flight may run on after a
// lending window ends or a reclaim names no deadline.
const DefaultReclaimGrace = 30 * time.Second

// Lease is a lending window of a lendable pool (PoolConfig.Lendable), as
// every gateway of a fleet applies it: absolute times, so that gateways
// sharing a store agree on them. The zero Lease is "not lent".
type Lease struct {
	// Until ends the window: from then on no new work is admitted, and
	// the work in flight has Grace more to finish.
	Until time.Time `json:"until"`
	// Grace is how long work in flight may run on once the window ends.
	// Zero means DefaultReclaimGrace.
	Grace time.Duration `json:"grace"`
	// ReclaimedAt, when not zero, is when the pool was reclaimed before
	// Until: admission stopped then.
	ReclaimedAt time.Time `json:"reclaimedAt,omitzero"`
	// ReclaimBy is the reclaim's deadline: lent work still in flight then
	// is cancelled. Set with ReclaimedAt.
	ReclaimBy time.Time `json:"reclaimBy,omitzero"`
}

// Admits reports whether the lease takes new work at now.
func (l Lease) Admits(now time.Time) bool {
	return !l.Until.IsZero() && now.Before(l.Until) && l.ReclaimedAt.IsZero()
}

// Deadline is when work still in flight on the pool is cancelled: the
// reclaim's deadline, or the window's end plus its grace; zero for the
// zero Lease.
func (l Lease) Deadline() time.Time {
	switch {
	case !l.ReclaimBy.IsZero():
		return l.ReclaimBy
	case l.Until.IsZero():
		return time.Time{}
	}
	g := l.Grace
	if g <= 0 {
		g = DefaultReclaimGrace
	}
	return l.Until.Add(g)
}

// lending is a lendable pool's lease and the lent requests in flight on
// it. The zero value is a pool not lent.
type lending struct {
	// admits is Lease.Admits, kept current by the timers: routing reads it
	// on every pick.
	admits atomic.Bool
	// reclaims counts leases that ended while admitting here
	// (reclaimed, or their window over); cancelled counts requests cut at
	// a deadline.
	reclaims, cancelled atomic.Int64

	mu struct {
		sync.Mutex
		// protects the fields below
		lease    Lease
		stop     *time.Timer // at lease.Until: admission stops
		cut      *time.Timer // at lease.Deadline(): in-flight work is cancelled
		inFlight map[*lentRequest]struct{}
	}
}

// lentRequest is one request in flight on a lendable pool.
type lentRequest struct {
	cancel context.CancelCauseFunc
}

// Lendable reports whether the pool takes work only while it is lent.
func (p *Pool) Lendable() bool { return p.Config.Lendable }

// admitsLent reports whether the pool takes new requests: always for a
// pool that is not lendable, while its lease admits for one that is.
func (p *Pool) admitsLent() bool { return !p.Config.Lendable || p.lend.admits.Load() }

// Lent reports whether a lendable pool takes lent work now.
func (p *Pool) Lent() bool { return p.Config.Lendable && p.lend.admits.Load() }

// Lease is the pool's current lease; zero when it was never lent.
func (p *Pool) Lease() Lease {
	p.lend.mu.Lock()
	defer p.lend.mu.Unlock()
	return p.lend.mu.lease
}

// LentInFlight is how many requests are in flight on the lent pool.
func (p *Pool) LentInFlight() int {
	p.lend.mu.Lock()
	defer p.lend.mu.Unlock()
	return len(p.lend.mu.inFlight)
}

// Reclaims is how many of the pool's leases have ended, reclaimed or run
// out; CancelledByReclaim how many requests a deadline cut.
func (p *Pool) Reclaims() int64 { return p.lend.reclaims.Load() }

// CancelledByReclaim is how many lent requests a reclaim's deadline cut.
func (p *Pool) CancelledByReclaim() int64 { return p.lend.cancelled.Load() }

// SetLease puts l in force on a lendable pool, now: admission opens or
// stops at once, and timers stop it at l.Until and cut the work in flight
// shortly before l.Deadline() (by a quarter of the time left, at most
// maxCutLead), so that the engines have dropped it by the deadline. A
// deadline already past cuts it now. Setting the lease
// a gateway already applied again changes nothing, so a fleet may apply
// every lease it reads.
func (p *Pool) SetLease(l Lease, now time.Time) {
	if !p.Config.Lendable {
		return
	}
	d := &p.lend
	d.mu.Lock()
	defer d.mu.Unlock()
	if leaseEqual(d.mu.lease, l) {
		return
	}
	d.mu.lease = l
	for _, t := range []*time.Timer{d.mu.stop, d.mu.cut} {
		if t != nil {
			t.Stop()
		}
	}
	d.mu.stop, d.mu.cut = nil, nil
	if !l.Admits(now) {
		d.stopLocked()
	} else {
		d.admits.Store(true)
		d.mu.stop = time.AfterFunc(l.Until.Sub(now), func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.mu.lease.Until.Equal(l.Until) {
				d.stopLocked()
			}
		})
	}
	deadline := l.Deadline()
	if deadline.IsZero() {
		return
	}
	cut := cutAt(l, now)
	if !cut.After(now) {
		d.cutLocked()
		return
	}
	d.mu.cut = time.AfterFunc(cut.Sub(now), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.mu.lease.Deadline().Equal(deadline) {
			d.cutLocked()
		}
	})
}

func leaseEqual(a, b Lease) bool {
	return a.Until.Equal(b.Until) && a.Grace == b.Grace && a.ReclaimedAt.Equal(b.ReclaimedAt) && a.ReclaimBy.Equal(b.ReclaimBy)
}

// stopLocked closes admission, counting a lease that ends here: one
// that admitted on this gateway (a stale lease read at start is not).
func (d *lending) stopLocked() {
	if d.admits.Swap(false) {
		d.reclaims.Add(1)
	}
}

// cutLocked cancels every lent request in flight.
func (d *lending) cutLocked() {
	for r := range d.mu.inFlight {
		r.cancel(ErrReclaimed)
		d.cancelled.Add(1)
		delete(d.mu.inFlight, r)
	}
}

// track derives the context of a request sent to the lendable pool,
// cancelled with ErrReclaimed when a lease's deadline passes; release
// forgets it and must be called once the request is over.
func (p *Pool) track(ctx context.Context) (_ context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	r := &lentRequest{cancel: cancel}
	d := &p.lend
	d.mu.Lock()
	if d.mu.inFlight == nil {
		d.mu.inFlight = make(map[*lentRequest]struct{})
	}
	d.mu.inFlight[r] = struct{}{}
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		delete(d.mu.inFlight, r)
		d.mu.Unlock()
		cancel(context.Canceled)
	}
}

// BackgroundOnly reports whether the endpoint's pool is lendable: it
// takes turns of the background band only, and only while lent.
func (e *Endpoint) BackgroundOnly() bool { return e.Pool != nil && e.Pool.Config.Lendable }

// Prioritizes reports whether the endpoint's engine schedules by each
// request's priority (PoolConfig.PriorityScheduling).
func (e *Endpoint) Prioritizes() bool { return e.Pool != nil && e.Pool.Config.PriorityScheduling }

// PreferLent compacts to the front of eps the available endpoints of lent
// pools, where a background turn granted on their room goes, and returns
// them; when there is none it returns eps as it is.
func PreferLent(eps []*Endpoint) []*Endpoint {
	lent := func(ep *Endpoint) bool { return ep.BackgroundOnly() && ep.Available() }
	if !slices.ContainsFunc(eps, lent) {
		return eps
	}
	return slices.DeleteFunc(eps, func(ep *Endpoint) bool { return !lent(ep) })
}

// KeepAdmitting compacts to the front of eps the endpoints a turn may be
// sent to: all but those of lent pools, unless lent is set (a turn of the
// background band, which lent pools take). Endpoints of a lendable pool
// that is not lent are not Available at all.
func KeepAdmitting(eps []*Endpoint, lent bool) []*Endpoint {
	if lent {
		return eps
	}
	return slices.DeleteFunc(eps, (*Endpoint).BackgroundOnly)
}
