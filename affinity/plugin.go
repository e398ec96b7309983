package affinity

import (
	"time"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// Plugin is a named step of the routing pipeline. The name is the one the
// config uses and the label of the plugin's latency metric.
type Plugin interface {
	Name() string
}

// Filter drops the candidates that must not take the request.
type Filter interface {
	Plugin
	// Filter keeps the candidates that pass, compacted in place at the front
	// of candidates, and returns them as candidates[:n]. The slice belongs to
	// the pipeline, not to the caller of Pick. It may return none; the
	// pipeline then fails with ErrNoEndpoint.
	Filter(c *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint
}

// Scorer rates candidates.
type Scorer interface {
	Plugin
	// Score writes the score of candidates[i] to scores[i], which the
	// pipeline has zeroed; len(scores) == len(candidates). Higher is better.
	// The pipeline clamps scores to [0, 1] (NaN counts as 0) and applies
	// the scorer's weight, so a scorer need not. Score must not allocate
	// per candidate or retain either slice.
	Score(c *Cycle, candidates []*pools.Endpoint, scores []float64)
}

// Picker chooses among the scored candidates.
type Picker interface {
	Plugin
	// Pick returns the position in candidates of the chosen endpoint.
	// scores[i], in [0, 1], is the weighted score of candidates[i].
	Pick(c *Cycle, candidates []*pools.Endpoint, scores []float64) int
}

// Cycle is the state of one run of the pipeline, shared by its plugins:
// the request and what was learnt about it once so that every plugin need
// not learn it again. Cycles are pooled; a plugin must not keep one, or
// anything it points to, after its call returns.
type Cycle struct {
	// Request is the request being routed.
	Request *Request
	// Now is the time the cycle started.
	Now time.Time
	// Matches, indexed by pools.Endpoint.Index, says how much of
	// Request.Hashes each endpoint holds. Nil when the policy has no
	// index or the request no hashes; endpoints at or beyond its length
	// hold nothing.
	Matches []kv.Match
	// PromptBlocks is len(Request.Hashes).
	PromptBlocks int
	// BlockSize is the number of tokens per block.
	BlockSize int
	// PinnedID is the ID of the endpoint the session is pinned to; "" if
	// sessionless or unpinned.
	PinnedID string

	// Set by the pipeline as it runs.
	picked      int  // position in candidates of the pick
	spilled     bool // the load guard moved the pick
	spilledFrom *pools.Endpoint

	all        []*pools.Endpoint // the caller's candidates, copied
	candidates []*pools.Endpoint // those that passed the filters
	raw        []float64         // one scorer's scores
	total      []float64         // weighted sum of the scores so far
	matches    []kv.Match        // backing store of Matches
}

// match returns what ep holds of the prompt, zero if unknown.
func (c *Cycle) match(ep *pools.Endpoint) kv.Match {
	if ep.Index < len(c.Matches) {
		return c.Matches[ep.Index]
	}
	return kv.Match{}
}

func (c *Cycle) reset() {
	clear(c.all[:cap(c.all)]) // drop the endpoints so the pool pins nothing
	*c = Cycle{all: c.all[:0], raw: c.raw[:0], total: c.total[:0], matches: c.matches[:0]}
}
