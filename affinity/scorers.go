package affinity

import (
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// scorerFactories build the scorers by config name.
var scorerFactories = map[string]func(*env) Scorer{
	ScorerPrefix:         func(e *env) Scorer { return &Prefix{TierWeights: e.tierWeights} },
	ScorerSession:        func(*env) Scorer { return Session{} },
	ScorerQueue:          func(*env) Scorer { return Queue{} },
	ScorerKVUtilization:  func(*env) Scorer { return KVUtilization{} },
	ScorerInFlightTokens: func(*env) Scorer { return InFlightTokens{} },
	ScorerPredictedTTFT: func(e *env) Scorer {
		return &PredictedTTFT{TierWeights: e.tierWeights, Stats: e.stats}
	},
	ScorerRoutedTokens: func(e *env) Scorer { return &RoutedTokens{Load: e.routed} },
	ScorerTTFTCost:     func(e *env) Scorer { return &TTFTCost{TierWeights: e.tierWeights, Model: e.model} },
	ScorerPrice:        func(e *env) Scorer { return &Price{TierWeights: e.tierWeights, Model: e.priceModel()} },
}

// staleMatchDiscount scales what an endpoint whose index entries may be
// wrong (kv.Match.Stale) is believed to hold.
const staleMatchDiscount = 0.5

// Prefix scores the longest prefix of the prompt an endpoint holds, each
// block weighted by the tier holding it, beyond what the least-cached
// candidate holds, as a fraction of the prompt's blocks: 1 when the whole
// prompt is in HBM here and nowhere else, 0 when nothing is cached here
// that is not cached on every candidate. A prefix every candidate holds (a
// tenant's system prompt, once warm) saves nothing by going anywhere in
// particular, so it must not pull sessions together.
type Prefix struct {
	TierWeights kv.TierWeights
}

// Name implements Plugin.
func (*Prefix) Name() string { return ScorerPrefix }

// Score implements Scorer.
func (p *Prefix) Score(c *Cycle, candidates []*pools.Endpoint, scores []float64) {
	if c.PromptBlocks == 0 || c.Matches == nil {
		return
	}
	least := -1.0
	for i, ep := range candidates {
		scores[i] = cachedBlocks(c.match(ep), &p.TierWeights)
		if least < 0 || scores[i] < least {
			least = scores[i]
		}
	}
	for i := range scores {
		scores[i] = (scores[i] - least) / float64(c.PromptBlocks)
	}
}

// cachedBlocks is the tier-weighted number of blocks m holds, discounted
// when its entries may be stale.
func cachedBlocks(m kv.Match, w *kv.TierWeights) float64 {
	b := m.Weighted(w)
	if m.Stale {
		b *= staleMatchDiscount
	}
	return b
}

// Session scores 1 for the endpoint the request's session is pinned to.
type Session struct{}

// Name implements Plugin.
func (Session) Name() string { return ScorerSession }

// Score implements Scorer.
func (Session) Score(c *Cycle, candidates []*pools.Endpoint, scores []float64) {
	if c.PinnedID == "" {
		return
	}
	for i, ep := range candidates {
		if ep.ID == c.PinnedID {
			scores[i] = 1
		}
	}
}

// Queue scores an endpoint's queue (engine waiting + gateway in flight)
// against the longest among the candidates: 1 for an empty queue, 0 for
// the longest.
type Queue struct{}

// Name implements Plugin.
func (Queue) Name() string { return ScorerQueue }

// Score implements Scorer.
func (Queue) Score(c *Cycle, candidates []*pools.Endpoint, scores []float64) {
	var most float64
	for i, ep := range candidates {
		scores[i] = queueDepth(ep, c.Now)
		most = max(most, scores[i])
	}
	relativeInverse(scores, most)
}

// relativeInverse maps each load in scores to 1 − load/most; every load
// is 1 when most is zero.
func relativeInverse(scores []float64, most float64) {
	for i, v := range scores {
		if most > 0 {
			scores[i] = 1 - v/most
		} else {
			scores[i] = 1
		}
	}
}

// neutralScore is what an endpoint gets from a load scorer when its load
// report is too old to trust.
const neutralScore = 0.5

// KVUtilization scores the free fraction of an endpoint's KV cache,
// 1 − KVUsage; a stale load report scores a neutral 0.5.
type KVUtilization struct{}

// Name implements Plugin.
func (KVUtilization) Name() string { return ScorerKVUtilization }

// Score implements Scorer.
func (KVUtilization) Score(c *Cycle, candidates []*pools.Endpoint, scores []float64) {
	for i, ep := range candidates {
		if ep.Stale(c.Now) {
			scores[i] = neutralScore
			continue
		}
		scores[i] = 1 - ep.Load().KVUsage
	}
}

// InFlightTokens scores the tokens the gateway has in flight to an
// endpoint against the most among the candidates: 1 for none, 0 for the
// most.
type InFlightTokens struct{}

// Name implements Plugin.
func (InFlightTokens) Name() string { return ScorerInFlightTokens }

// Score implements Scorer.
func (InFlightTokens) Score(_ *Cycle, candidates []*pools.Endpoint, scores []float64) {
	var most float64
	for i, ep := range candidates {
		scores[i] = float64(ep.InFlightTokens())
		most = max(most, scores[i])
	}
	relativeInverse(scores, most)
}

// PredictedTTFT scores the time to first token predicted on each endpoint,
// lowest best: min/predicted, so the fastest scores 1 and one predicted
// twice as slow 0.5. The prediction is
//
//	(uncached + queue × meanUncached) / prefillRate
//
// where uncached is the prompt's tokens less the tier-weighted tokens the
// endpoint holds, queue its queue (engine waiting + gateway in flight),
// and prefillRate and meanUncached the endpoint's moving averages of
// measured prefill throughput and of the uncached tokens of its requests
// (see EndpointStats), or the configured prior and this request's uncached
// tokens before any measurement.
type PredictedTTFT struct {
	TierWeights kv.TierWeights
	Stats       *EndpointStats
}

// Name implements Plugin.
func (*PredictedTTFT) Name() string { return ScorerPredictedTTFT }

// Score implements Scorer.
func (p *PredictedTTFT) Score(c *Cycle, candidates []*pools.Endpoint, scores []float64) {
	for i, ep := range candidates {
		uncached := uncachedTokens(c, ep, &p.TierWeights)
		rate, mean := p.Stats.get(ep.Index)
		if mean < 0 {
			mean = uncached
		}
		scores[i] = (uncached + queueDepth(ep, c.Now)*mean) / rate
	}
	fastestOver(scores)
}

// promptTokens is the request's prompt length, in tokens: the gateway's
// estimate, or the hashed blocks when they say more.
func promptTokens(c *Cycle) int {
	return max(c.Request.PromptTokens, c.PromptBlocks*c.BlockSize)
}

var (
	_ Scorer = (*Prefix)(nil)
	_ Scorer = Session{}
	_ Scorer = Queue{}
	_ Scorer = KVUtilization{}
	_ Scorer = InFlightTokens{}
	_ Scorer = (*PredictedTTFT)(nil)
)
