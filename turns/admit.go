package turns

import (
	"math"
	"time"

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

	rpm, tpm bucket
	// held and heldTokens count the tenant's turns between admission and
	// release: queued or dispatched.
	held       int
	heldTokens int64

	queued [numBands]prometheus.Gauge
	wait   [numBands]prometheus.Observer
	tokens prometheus.Counter
}

// bucket is a token bucket that holds up to one minute of its rate.
type bucket struct {
	level float64
	at    time.Time
}

// refill tops the bucket up for the time since the last refill. A new
// bucket starts full.
func (b *bucket) refill(now time.Time, perMinute float64) {
	if b.at.IsZero() {
		b.level, b.at = perMinute, now
		return
	}
	if d := now.Sub(b.at); d > 0 {
		b.level = min(perMinute, b.level+perMinute*d.Minutes())
		b.at = now
	}
}

// wait is how long until the bucket holds need, rounded up to the
// millisecond.
func (b *bucket) wait(need, perMinute float64) time.Duration {
	ms := (need - b.level) / perMinute * float64(time.Minute/time.Millisecond)
	return time.Duration(math.Ceil(ms-1e-6)) * time.Millisecond
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
// charges the tenant's quotas. In order: the tenant's quotas (all bands);
// the shed curve for Background and for
// Standard from a tenant over its fair share (never Interactive), and the
// band's held cap while the pool has no room for the lower bands (by
// default Background only), unless the pool has no available endpoint;
// the band's queue caps.
//
// A pool with no available endpoint sheds nothing: its turns wait, up to
// their band's TTL, for an endpoint to come back. Replicas that fail their
// health checks together for a moment (a busy host) or restart one after
// another must not cost the turns that arrive meanwhile.
func (c *Controller) admitLocked(w *waiter, m *Measurement, now time.Time, cfg *FlowControl) *ShedError {
	ts := w.tenant
	q := &ts.cfg.Quota
	if q.Concurrent > 0 && ts.held >= q.Concurrent {
		return shed(ReasonQuotaConcurrency, cfg.RetryAfter)
	}
	if q.RequestsPerMinute > 0 {
		per := float64(q.RequestsPerMinute)
		ts.rpm.refill(now, per)
		if ts.rpm.level < 1 {
			return shed(ReasonQuotaRPM, ts.rpm.wait(1, per))
		}
	}
	cost := float64(w.cost)
	if q.TokensPerMinute > 0 {
		per := float64(q.TokensPerMinute)
		ts.tpm.refill(now, per)
		// A turn dearer than a whole minute fits only a full bucket.
		if need := min(cost, per); ts.tpm.level < need {
			return shed(ReasonQuotaTPM, ts.tpm.wait(need, per))
		}
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

	if q.RequestsPerMinute > 0 {
		ts.rpm.level--
	}
	if q.TokensPerMinute > 0 {
		ts.tpm.level -= cost
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

// unholdLocked ends a hold. When the turn never ran (shed from the queue,
// cancelled) its quota charges are refunded; otherwise the tokens-per-minute
// charge is corrected by the actual tokens (negative: the estimate stands).
func (c *Controller) unholdLocked(ts *tenantState, cost int64, ran bool, actual int) {
	ts.held--
	ts.heldTokens -= cost
	c.mu.heldTokens -= cost
	if ts.held == 0 {
		c.mu.activeWeight -= ts.weight
	}
	if c.mu.heldTokens == 0 {
		c.mu.activeWeight = 0 // drop float drift whenever the gateway empties
	}
	q := &ts.cfg.Quota
	switch {
	case !ran:
		if q.RequestsPerMinute > 0 {
			ts.rpm.level = min(ts.rpm.level+1, float64(q.RequestsPerMinute))
		}
		if q.TokensPerMinute > 0 {
			ts.tpm.level = min(ts.tpm.level+float64(cost), float64(q.TokensPerMinute))
		}
	case actual >= 0 && q.TokensPerMinute > 0:
		ts.tpm.level = min(ts.tpm.level-float64(int64(actual)-cost), float64(q.TokensPerMinute))
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
