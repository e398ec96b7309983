package affinity

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// CacheAware routes each turn to the endpoint that already holds its
// prefix, without piling everyone onto one endpoint: the pipeline's filters
// drop endpoints that cannot serve, its scorers (by default prefix,
// session, queue, kv-utilization, predicted-ttft) rate the rest, its
// picker chooses, and the load guard spills an overloaded pick.
//
// After the pick it records the prompt's blocks in the index on the chosen
// endpoint ahead of the engine (the engine will hold them once it has
// prefilled), so that the next turn of the session, or a request with the
// same prefix, finds them without waiting for a KV event; and it pins the
// session to the endpoint, saying why a pin moved. Build it with NewPolicy.
type CacheAware struct {
	name      string // cache-aware or cost-aware
	pipe      *Pipeline
	index     *kv.Index       // nil: no prefix scoring
	sessions  *sessions.Store // nil: no pins
	blockSize int
	stats     *EndpointStats
	routed    *RoutedLoad
	model     *TTFTModel
	price     *PriceModel // nil: no price scorer
	weights   kv.TierWeights
	now       func() time.Time

	matchObs  prometheus.Observer // nil: metrics off
	decisions [numReasons]prometheus.Counter
	predicted prometheus.Histogram
	actual    prometheus.Histogram
	cache     *cacheMetrics
	accounts  endpointTable[cacheAccount]
}

// Name implements Policy.
func (p *CacheAware) Name() string { return p.name }

// NeedsHashes reports whether the gateway should hash prompts: only when
// there is an index to look them up in.
func (p *CacheAware) NeedsHashes() bool { return p.index != nil }

// Stats are the per-endpoint measurements the policy keeps from outcomes.
func (p *CacheAware) Stats() *EndpointStats { return p.stats }

// Pick implements Policy. It does not allocate in steady state: the
// per-request slices come from a pool, scorers write into them, and the
// session and index lookups are allocation-free.
func (p *CacheAware) Pick(ctx context.Context, req *Request, candidates []*pools.Endpoint) (*pools.Endpoint, error) {
	now := p.now()
	c := newCycle(req, candidates, now)
	defer c.release()
	c.BlockSize = p.blockSize
	if req.SessionKey != "" && p.sessions != nil {
		c.PinnedID, _ = p.sessions.Pinned(req.Tenant, req.SessionKey, now)
	}
	timing := p.pipe.sampled()
	if p.index != nil && len(req.Hashes) > 0 {
		p.matchPrefix(c, candidates, timing)
	}
	ep, err := p.pipe.run(ctx, c, timing)
	if err != nil {
		return nil, err
	}
	m := c.match(ep)
	p.decisions[decide(c, ep, m)].Inc()
	pred := p.model.Predict(ep, uncachedTokens(c, ep, &p.weights), now)
	req.Routing = Routing{Endpoint: ep, CachedBlocks: m.Blocks, Prediction: pred, At: now}
	if p.index != nil && len(req.Hashes) > 0 {
		p.notePrediction(&req.Routing, c, candidates, m)
	}
	p.routed.Add(ep.Index, promptTokens(c))
	req.Routing.Prediction.Mark = p.model.Routed(ep.Index, pred.Uncached, now)
	if p.index != nil && len(req.Hashes) > 0 {
		p.index.RecordRouted(ep.Index, req.Hashes, m.Blocks)
		req.Routing.Recorded = true
	}
	if req.SessionKey != "" && p.sessions != nil {
		reason := sessions.PinNew
		if c.PinnedID != "" && c.PinnedID != ep.ID {
			reason = pinMoveReason(c, candidates)
		}
		// A failed write of the pin is counted by the store and costs at
		// most a cold turn after a restart; routing goes on.
		_ = p.sessions.Pin(ctx, req.Tenant, req.SessionKey, ep.ID, len(req.Hashes), reason, now)
	}
	return ep, nil
}

// matchPrefix fills c.Matches for the candidates from the index.
func (p *CacheAware) matchPrefix(c *Cycle, candidates []*pools.Endpoint, timing bool) {
	top := 0
	for _, ep := range candidates {
		top = max(top, ep.Index)
	}
	start := now(timing)
	c.matches = grow(c.matches, top+1)
	p.index.MatchPrefix(c.Request.Hashes, c.matches)
	since(p.matchObs, timing, start)
	c.Matches = c.matches
	c.PromptBlocks = len(c.Request.Hashes)
}

// notePrediction notes in r what the index said of the prompt beside the
// pick's match m, for Done's explanation of a miss; candidates are the
// caller's, before filtering.
func (p *CacheAware) notePrediction(r *Routing, c *Cycle, candidates []*pools.Endpoint, m kv.Match) {
	for _, ep := range candidates {
		if ep != r.Endpoint {
			r.BestOtherBlocks = max(r.BestOtherBlocks, c.match(ep).Blocks)
		}
	}
	r.LowerTierBlocks = m.Blocks - m.ByTier[kv.HBM]
	r.Stale = m.Stale
	r.EngineRemovals = p.index.EngineRemovals(r.Endpoint.Index)
	r.BlockSize = p.blockSize
}

// decide names the reason of a pick, the most specific first.
func decide(c *Cycle, ep *pools.Endpoint, m kv.Match) decisionReason {
	switch {
	case c.spilled:
		return reasonLoadGuardSpill
	case m.Blocks < mostCached(c):
		return reasonPrefixSpill
	case c.PinnedID != "" && ep.ID == c.PinnedID:
		return reasonSessionPin
	case m.Blocks > 0:
		return reasonPrefixHit
	}
	return reasonNoCache
}

// mostCached is the most blocks of the prompt any candidate that passed
// the filters holds.
func mostCached(c *Cycle) int {
	most := 0
	for _, ep := range c.candidates {
		most = max(most, c.match(ep).Blocks)
	}
	return most
}

// pinMoveReason says why the session left the endpoint it was pinned to,
// c.PinnedID; candidates are the caller's, before filtering.
func pinMoveReason(c *Cycle, candidates []*pools.Endpoint) sessions.PinReason {
	if c.spilled && c.spilledFrom.ID == c.PinnedID {
		return sessions.PinOverloaded
	}
	var pinned *pools.Endpoint
	for _, ep := range candidates {
		if ep.ID == c.PinnedID {
			pinned = ep
			break
		}
	}
	switch {
	case pinned == nil:
		return sessions.PinUnavailable
	case !pinned.Healthy():
		return sessions.PinUnhealthy
	case pinned.Draining():
		return sessions.PinDraining
	case pinned.BreakerState() != gobreaker.StateClosed:
		return sessions.PinBreakerOpen
	}
	for _, ep := range c.candidates {
		if ep == pinned {
			return sessions.PinRescored
		}
	}
	return sessions.PinOverloaded // dropped by has-room
}

// Done implements Policy. A failed request takes back the blocks Pick
// recorded ahead of the engine; a served one feeds the prediction metrics
// and the endpoint's prefill measurements. TTFT should be the time to the
// first streamed token: for a non-streamed answer the gateway should report
// zero, which measures nothing, rather than the whole generation.
func (p *CacheAware) Done(req *Request, ep *pools.Endpoint, o Outcome) {
	r := &req.Routing
	if r.Endpoint != ep {
		return // not the pick this request last made
	}
	if o.Err != nil {
		p.model.Failed(ep.Index, r.Prediction.Uncached)
		if r.Recorded && r.CachedBlocks < len(req.Hashes) {
			p.index.RemoveRouted(ep.Index, req.Hashes[r.CachedBlocks:])
		}
		r.Recorded = false
		return
	}
	p.model.Answered(ep.Index, r.Prediction.Mark)
	if o.PromptTokens <= 0 {
		return // the engine reported no usage
	}
	if len(req.Hashes) > 0 && p.index != nil {
		p.predicted.Observe(float64(r.CachedBlocks * p.blockSize))
		p.actual.Observe(float64(o.CachedTokens))
		p.explain(req, ep, o)
	}
	p.stats.Observe(ep.Index, o.PromptTokens-o.CachedTokens, o.TTFT)
	work := r.Prediction.Queued + float64(max(o.PromptTokens-o.CachedTokens, 0))
	p.model.Observe(ep.Index, work, r.Prediction.Sequences, r.Prediction.Overflow, o.TTFT)
	if p.price != nil {
		p.price.Observe(ep, o, p.now().Sub(r.At), r.Prediction.Sequences)
	}
}

var _ Policy = (*CacheAware)(nil)
