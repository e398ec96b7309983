package turns

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
)

// tenantState is what the Controller tracks of one tenant across pools.
// Guarded by Controller.mu; created on the tenant's first turn and kept
// for the Controller's life (tenants are authenticated, so few).
type tenantState struct {
	name string
	// from is the tenants snapshot the fields below were copied from.
	from *tenantSet
	cfg  Tenant
	// weight is cfg.Weight, kept beside the hot fields.
	weight float64

	// held and heldTokens count the tenant's turns between admission and
	// release: queued or dispatched.
	held       int
	heldTokens int64

	queued [numBands]prometheus.Gauge
	wait   [numBands]prometheus.Observer
	tokens prometheus.Counter
}

// shedProbability is the ShedCurve at saturation s.
func shedProbability(c *ShedCurve, s float64) float64 {
	switch {
	case s < c.Start:
		return 0
	case s >= c.Full:
		return c.MaxProbability
	}
	return c.MaxProbability * math.Pow((s-c.Start)/(c.Full-c.Start), c.Exponent)
}

// admitLocked decides whether w may join its pool's queue and, if so,
// holds it against its tenant. In order: the tenant's concurrency quota
// (all bands; its budgets a minute were charged before, by the budgets
// package); the shed curve for Background and for Standard from a tenant
// over its fair share (never Interactive), and the band's held cap while
// the pool has no room for the lower bands (by default Background only),
// unless the pool has no available endpoint; the band's queue caps, and
// the fleet's (fleetBound).
//
// A pool with no available endpoint sheds nothing: its turns wait, up to
// their band's TTL, for an endpoint to come back. Replicas that fail their
// health checks together for a moment (a busy host) or restart one after
// another must not cost the turns that arrive meanwhile.
func (c *Controller) admitLocked(w *waiter, m *Measurement, cfg *FlowControl) *ShedError {
	ts := w.tenant
	q := &ts.cfg.Quota
	if q.Concurrent > 0 && ts.held >= q.Concurrent {
		return shed(ReasonQuotaConcurrency, cfg.RetryAfter)
	}
	// With no endpoint the saturation is a placeholder, not load: the
	// curve would shed turns that an endpoint back in a moment can serve.
	// The curve reads the pool's whole saturation; before it sheds, a
	// band with a held cap sheds what arrives while the pool has no room
	// for it and the cap is reached (by default Background: shed first).
	// Interactive turns are never shed here.
	bq := &w.pool.bands[w.band.index()]
	bc := cfg.Bands.band(w.band)
	if m.Endpoints > 0 {
		switch w.band {
		case Background:
			// A lent pool's idle engine is room the saturation of the
			// others does not measure.
			if w.pool.lentRoom(m) == 0 && c.shedsLocked(&cfg.Shed, m.Saturation) {
				return shed(ReasonSaturated, cfg.RetryAfter)
			}
		case Standard:
			if c.overShareLocked(ts, w.cost) && c.shedsLocked(&cfg.Shed, m.Saturation) {
				return shed(ReasonOverShare, cfg.RetryAfter)
			}
		}
		if limit := cfg.heldLimit(w.band, m.Endpoints); limit >= 0 && bq.count >= limit && !w.pool.roomForBand(w.band, m, cfg) {
			return shed(ReasonBandHeld, cfg.RetryAfter)
		}
	}
	if bq.count >= bc.MaxQueued || (bq.count > 0 && bq.tokens+w.cost > bc.MaxQueuedTokens) {
		return shed(ReasonQueueFull, cfg.RetryAfter)
	}
	if n, ok := w.pool.fleetBound(w.band, m, cfg); ok && w.pool.ahead(w.band) >= n {
		return shed(ReasonQueueFull, cfg.RetryAfter)
	}

	c.holdLocked(ts, w.cost)
	return nil
}

// shedsLocked draws against the shed curve.
func (c *Controller) shedsLocked(curve *ShedCurve, saturation float64) bool {
	p := shedProbability(curve, saturation)
	return p > 0 && c.random() < p
}

// overShareLocked reports whether the tenant, with cost more, would hold
// more than its weighted share of the tokens held by all tenants with turns
// in the gateway. A tenant alone is never over its share.
func (c *Controller) overShareLocked(ts *tenantState, cost int64) bool {
	active := c.mu.activeWeight
	if ts.held == 0 {
		active += ts.weight
	}
	if active <= ts.weight {
		return false
	}
	mine := float64(ts.heldTokens + cost)
	all := float64(c.mu.heldTokens + cost)
	return mine*active > ts.weight*all
}

// holdLocked counts an admitted turn against its tenant.
func (c *Controller) holdLocked(ts *tenantState, cost int64) {
	if ts.held == 0 {
		c.mu.activeWeight += ts.weight
	}
	ts.held++
	ts.heldTokens += cost
	c.mu.heldTokens += cost
}

// unholdLocked ends a hold.
func (c *Controller) unholdLocked(ts *tenantState, cost int64) {
	ts.held--
	ts.heldTokens -= cost
	c.mu.heldTokens -= cost
	if ts.held == 0 {
		c.mu.activeWeight -= ts.weight
	}
	if c.mu.heldTokens == 0 {
		c.mu.activeWeight = 0 // drop float drift whenever the gateway empties
	}
}

// tenantLocked returns the tenant's state, creating it on first use and
// refreshing its settings when the tenants were replaced.
func (c *Controller) tenantLocked(name string, set *tenantSet) *tenantState {
	ts := c.mu.tenants[name]
	if ts == nil {
		ts = &tenantState{name: name, tokens: c.metrics.tokens.WithLabelValues(name)}
		for i, b := range Bands {
			ts.queued[i] = c.metrics.queued.WithLabelValues(b.String(), name)
			ts.wait[i] = c.metrics.wait.WithLabelValues(b.String(), name)
		}
		c.mu.tenants[name] = ts
	}
	if ts.from != set {
		ts.from = set
		ts.cfg = set.lookup(name)
		if ts.held > 0 {
			c.mu.activeWeight += ts.cfg.Weight - ts.weight
		}
		ts.weight = ts.cfg.Weight
	}
	return ts
}

// fleetBound is how many turns a turn of band b may find ahead of it in
// the pool's queues (ahead): what the pool's engines, measured as m, start
// within the band's TTL at the pace they end turns. Each of the pool's
// Seqs sequences takes a new turn every hold (the pool's smoothed
// dispatch-to-release time), so within a TTL the fleet starts
//
//	turns = max(⌈FleetQueueBound · Seqs · TTL / hold⌉, Seqs)
//
// A turn that finds more ahead would wait past its TTL. Engines that run
// fewer sequences than their max_num_seqs (their KV cache full first) start
// fewer: the bound errs towards keeping turns, never towards shedding what
// the fleet could serve. Background turns, shed first, count every band's
// turns ahead of them and are bounded by the Standard TTL when it is
// shorter than theirs, so a filling queue sheds them before it sheds any
// Standard turn. ok is false while the bound is off (FleetQueueBound
// negative), the pool has no available endpoint, or no turn of the pool has
// ended yet (no hold measured): then MaxQueued and MaxQueuedTokens bound the
// band alone, as they always do too.
func (pq *poolQueue) fleetBound(b Band, m *Measurement, cfg *FlowControl) (turns int, ok bool) {
	if cfg.FleetQueueBound < 0 || m.Endpoints == 0 || pq.hold <= 0 {
		return 0, false
	}
	ttl := cfg.Bands.band(b).TTL
	if b == Background {
		ttl = min(ttl, cfg.Bands.Standard.TTL)
	}
	seqs := m.Seqs
	if seqs <= 0 {
		seqs = max(m.Slots, 1)
	}
	drains := cfg.FleetQueueBound * ttl.Seconds() / pq.hold
	return max(int(math.Ceil(float64(seqs)*drains)), seqs), true
}

// ahead is the turns queued in the pool that a turn of band b waits
// behind: its band's and the more urgent bands'.
func (pq *poolQueue) ahead(b Band) (turns int) {
	for i := 0; i <= b.index(); i++ {
		turns += pq.bands[i].count
	}
	return turns
}
