package affinity

import (
	"sync"

	"github.com/turnpike-gateway/turnpike/pools"
)

// RoutedLoad keeps, per endpoint, the prompt tokens the policy routed to it
// lately: each pick adds its prompt's tokens to its endpoint after every
// endpoint's total has decayed by 1/Window. Decaying by picks, not by wall
// time, makes it independent of the clock and of the pace of the traffic:
// over the last Window picks, it is the prompt context each endpoint was
// asked to hold, which for sticky sessions is their KV working set. Safe
// for concurrent use; Add and the scorer hold one short mutex.
type RoutedLoad struct {
	keep float64 // 1 − 1/window
	mu   struct {
		sync.Mutex
		// tokens by endpoint index, grown on demand
		tokens []float64
	}
}

// NewRoutedLoad returns an empty table that forgets over window picks.
func NewRoutedLoad(window int) *RoutedLoad {
	return &RoutedLoad{keep: 1 - 1/float64(max(window, 1))}
}

// Add records a pick of endpoint for a prompt of tokens.
func (r *RoutedLoad) Add(endpoint, tokens int) {
	if endpoint < 0 || tokens <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if endpoint >= len(r.mu.tokens) {
		r.mu.tokens = append(r.mu.tokens, make([]float64, endpoint+1-len(r.mu.tokens))...)
	}
	for i := range r.mu.tokens {
		r.mu.tokens[i] *= r.keep
	}
	r.mu.tokens[endpoint] += float64(tokens)
}

// Tokens returns endpoint's decayed routed tokens.
func (r *RoutedLoad) Tokens(endpoint int) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tokensLocked(endpoint)
}

func (r *RoutedLoad) tokensLocked(endpoint int) float64 {
	if endpoint < 0 || endpoint >= len(r.mu.tokens) {
		return 0
	}
	return r.mu.tokens[endpoint]
}

// RoutedTokens scores the prompt tokens recently routed to each endpoint
// (see RoutedLoad) against the most among the candidates: 1 for none, 0
// for the most. It sees what the queue cannot: sessions between turns,
// whose context still occupies the endpoint's KV cache and whose next turn
// will come back to it. New sessions thus go where there is room, and no
// endpoint is left idle while the others thrash.
type RoutedTokens struct {
	Load *RoutedLoad
}

// Name implements Plugin.
func (*RoutedTokens) Name() string { return ScorerRoutedTokens }

// Score implements Scorer.
func (s *RoutedTokens) Score(_ *Cycle, candidates []*pools.Endpoint, scores []float64) {
	var most float64
	s.Load.mu.Lock()
	for i, ep := range candidates {
		scores[i] = s.Load.tokensLocked(ep.Index)
		most = max(most, scores[i])
	}
	s.Load.mu.Unlock()
	relativeInverse(scores, most)
}

var _ Scorer = (*RoutedTokens)(nil)
