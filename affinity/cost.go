package affinity

import (
	"math"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TTFTModel predicts, per endpoint, the time to first token of a prompt
// sent there now, and learns from the time to first token observed:
//
//	ttft = a · work + b · sequences + c · overflow
//	work = queued prefill + this prompt's uncached tokens
//
// queued prefill is the uncached tokens routed to the endpoint that it has
// not yet had time to prefill (a leaky bucket, drained at 1/a tokens per
// second), or, when more, the engine's waiting requests times their mean
// uncached tokens (this prompt's before any was measured), which also
// counts other gateways' traffic. sequences is
// the decode pressure: the requests running there, by the engine's count
// or the gateway's in flight, whichever is more; each costs the new prompt
// a share of every step it waits for. overflow is what the endpoint's KV
// cache cannot hold: its working set — the tokens in flight there (prompts
// and output budgets, as the gateway estimated them) or, when more, the
// prompt context routed there lately (RoutedLoad: sessions between turns
// still fill the cache) — plus this prompt's uncached tokens, less the
// cache's size when the engine reports it. An engine short of KV blocks
// admits a prompt only as requests ahead of it finish, and what it evicts
// to make room some later turn prefills again, so a token of overflow
// costs at least a token of prefill. a (seconds per token of work), b
// (seconds per running sequence) and c (seconds per token of overflow, at
// least a) are learned per endpoint by normalised least mean squares from
// each outcome's observed TTFT, starting from the configured prefill rate
// for a and c and no decode cost.
//
// Prefix and load are one number here: a prompt whose prefix an endpoint
// holds has less work there, a queue adds work, and the endpoint with the
// least predicted time wins. Safe for concurrent use; one short mutex.
type TTFTModel struct {
	prior     float64 // prefill rate before any measurement, tokens/s
	smoothing float64 // NLMS step, (0, 1]
	stats     *EndpointStats
	routed    *RoutedLoad // nil: the working set is the tokens in flight

	mu struct {
		sync.Mutex
		// by endpoint index, grown on demand
		eps []endpointModel
	}
}

// endpointModel is one endpoint's learned coefficients and backlog, in the
// scaled units of the NLMS update (see scaleWork, scaleSeqs).
type endpointModel struct {
	init    bool
	a, b, c float64 // seconds per scaleWork tokens, per scaleSeqs sequences, per scaleWork tokens
	backlog float64 // uncached tokens routed and not yet prefilled
	at      time.Time
	// routed is the uncached tokens ever routed here: a request that has
	// answered was prefilled, and so, in an engine's first-come order, was
	// everything routed before it.
	routed float64
}

// The features are scaled to comparable magnitudes so that one NLMS step
// moves both coefficients sensibly: a prompt's work is thousands of
// tokens, a batch tens of sequences.
const (
	scaleWork = 8192.0
	scaleSeqs = 16.0
)

// Bounds on the learned coefficients: a prefill rate between 100 and
// 10⁸ tokens/s, and at most 10 s of decode cost per scaleSeqs sequences.
const (
	minA, maxA = scaleWork / 1e8, scaleWork / 100
	maxB       = 10.0
)

// NewTTFTModel returns a model that assumes prior tokens/s of prefill and
// no decode cost until outcomes teach it otherwise, learning with step
// smoothing; stats supplies each endpoint's mean uncached tokens.
// routed, when not nil, is the prompt context routed to each endpoint
// lately, its KV working set (see overflow).
func NewTTFTModel(prior, smoothing float64, stats *EndpointStats, routed *RoutedLoad) *TTFTModel {
	return &TTFTModel{prior: prior, smoothing: smoothing, stats: stats, routed: routed}
}

// Prediction is one endpoint's predicted time to first token, with its
// parts.
type Prediction struct {
	// Queued is the prefill work, in tokens, ahead of the prompt.
	Queued float64
	// Uncached is the prompt's tokens the endpoint must prefill.
	Uncached float64
	// Sequences is the decode pressure: requests running there.
	Sequences float64
	// Overflow is the tokens the endpoint's KV cache cannot hold.
	Overflow float64
	// TTFT is the predicted time to first token.
	TTFT time.Duration
	// Mark is the endpoint's routed-work counter after this request was
	// routed (see TTFTModel.Answered).
	Mark float64
}

// entryLocked returns endpoint's model, creating it from the prior.
func (m *TTFTModel) entryLocked(endpoint int) *endpointModel {
	if endpoint >= len(m.mu.eps) {
		m.mu.eps = append(m.mu.eps, make([]endpointModel, endpoint+1-len(m.mu.eps))...)
	}
	e := &m.mu.eps[endpoint]
	if !e.init {
		e.init = true
		e.a = clampA(scaleWork / m.prior)
		e.c = e.a
	}
	return e
}

// drainLocked lets e's backlog drain until now at its learned rate.
func (e *endpointModel) drainLocked(now time.Time) {
	if !e.at.IsZero() && now.After(e.at) {
		e.backlog = max(e.backlog-now.Sub(e.at).Seconds()*scaleWork/e.a, 0)
	}
	e.at = now
}

// predictLocked is Predict under the lock.
func (m *TTFTModel) predictLocked(ep *pools.Endpoint, uncached float64, now time.Time) Prediction {
	e := m.entryLocked(ep.Index)
	e.drainLocked(now)
	p := Prediction{Queued: e.backlog, Uncached: uncached, Sequences: float64(ep.InFlight())}
	l := ep.Load()
	if kv := l.KVTokens(); kv > 0 {
		working := float64(ep.InFlightTokens())
		if m.routed != nil {
			working = max(working, m.routed.Tokens(ep.Index))
		}
		p.Overflow = max(working+uncached-float64(kv), 0)
	}
	if !ep.Stale(now) {
		if w := ep.Waiting(now); w > 0 {
			_, mean := m.stats.get(ep.Index)
			if mean < 0 {
				mean = uncached // nothing measured there yet: requests like this one
			}
			p.Queued = max(p.Queued, float64(w)*mean)
		}
		p.Sequences = max(p.Sequences, float64(l.Running))
	}
	s := e.a*(p.Queued+p.Uncached)/scaleWork + e.b*p.Sequences/scaleSeqs + e.c*p.Overflow/scaleWork
	p.TTFT = time.Duration(s * float64(time.Second))
	return p
}

// Predict is the predicted time to first token on ep of a prompt with
// uncached tokens to prefill there.
func (m *TTFTModel) Predict(ep *pools.Endpoint, uncached float64, now time.Time) Prediction {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.predictLocked(ep, uncached, now)
}

// Routed adds a prompt's uncached tokens to endpoint's backlog, and
// returns its mark for Answered.
func (m *TTFTModel) Routed(endpoint int, uncached float64, now time.Time) (mark float64) {
	if endpoint < 0 {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entryLocked(endpoint)
	e.drainLocked(now)
	if uncached > 0 {
		e.backlog += uncached
		e.routed += uncached
	}
	return e.routed
}

// Failed takes back what Routed added for a request that never ran.
func (m *TTFTModel) Failed(endpoint int, uncached float64) {
	if endpoint < 0 || !(uncached > 0) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entryLocked(endpoint)
	e.backlog = max(e.backlog-uncached, 0)
}

// Answered says that the request Routed returned mark for has answered:
// what is left of the backlog was routed after it.
func (m *TTFTModel) Answered(endpoint int, mark float64) {
	if endpoint < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entryLocked(endpoint)
	e.backlog = min(e.backlog, max(e.routed-mark, 0))
}

// Observe teaches endpoint's model that work tokens (queued when routed
// plus the prompt's uncached tokens as the engine counted them) under
// sequences of decode pressure and overflow tokens of KV shortage took ttft
// to the first token.
func (m *TTFTModel) Observe(endpoint int, work, sequences, overflow float64, ttft time.Duration) {
	if endpoint < 0 || ttft <= 0 || !(work > 0) {
		return
	}
	x1, x2, x3 := work/scaleWork, sequences/scaleSeqs, overflow/scaleWork
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entryLocked(endpoint)
	err := ttft.Seconds() - (e.a*x1 + e.b*x2 + e.c*x3)
	step := m.smoothing * err / (x1*x1 + x2*x2 + x3*x3 + 1e-9)
	e.a = clampA(e.a + step*x1)
	e.b = min(max(e.b+step*x2, 0), maxB)
	e.c = min(max(e.c+step*x3, e.a), maxA)
}

// Coefficients are endpoint's learned prefill rate, in tokens per second,
// and decode cost, seconds per running sequence.
func (m *TTFTModel) Coefficients(endpoint int) (prefillRate, perSequence float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entryLocked(endpoint)
	return scaleWork / e.a, e.b / scaleSeqs
}

func clampA(a float64) float64 {
	if math.IsNaN(a) {
		return maxA
	}
	return min(max(a, minA), maxA)
}

// TTFTCost scores each candidate by its predicted time to first token (see
// TTFTModel), lowest best: min/predicted, so the fastest scores 1 and one
// predicted twice as slow 0.5. Alone in the pipeline with the max-score
// picker, the pick is the endpoint of least predicted TTFT: a hot prefix
// spills to a colder endpoint exactly when waiting behind the hot one's
// queue would cost more than prefilling the prefix again.
type TTFTCost struct {
	TierWeights kv.TierWeights
	Model       *TTFTModel
}

// Name implements Plugin.
func (*TTFTCost) Name() string { return ScorerTTFTCost }

// Score implements Scorer.
func (s *TTFTCost) Score(c *Cycle, candidates []*pools.Endpoint, scores []float64) {
	s.Model.mu.Lock()
	for i, ep := range candidates {
		scores[i] = s.Model.predictLocked(ep, uncachedTokens(c, ep, &s.TierWeights), c.Now).TTFT.Seconds()
	}
	s.Model.mu.Unlock()
	fastestOver(scores)
}

// fastestOver maps each predicted time in scores to fastest/time, 1 for
// the fastest (and for a zero time).
func fastestOver(scores []float64) {
	fastest := -1.0
	for _, t := range scores {
		if fastest < 0 || t < fastest {
			fastest = t
		}
	}
	for i, t := range scores {
		if t > 0 {
			scores[i] = fastest / t
		} else {
			scores[i] = 1
		}
	}
}

// uncachedTokens is what ep must prefill of the prompt: its tokens less
// the tier-weighted tokens ep holds (a block in CPU memory costs a
// transfer, a fraction of a recompute).
func uncachedTokens(c *Cycle, ep *pools.Endpoint, w *kv.TierWeights) float64 {
	prompt := float64(promptTokens(c))
	if c.Matches == nil {
		return prompt
	}
	return max(prompt-cachedBlocks(c.match(ep), w)*float64(c.BlockSize), 0)
}

var _ Scorer = (*TTFTCost)(nil)
