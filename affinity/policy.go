package affinity

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// ErrNoEndpoint means no candidate passed the filters.
var ErrNoEndpoint = errors.New("affinity: no endpoint available")

// Request is what a policy knows about the turn it routes. The gateway
// fills it once per request; policies must not keep it after Done.
type Request struct {
	// Model is the served model name the client asked for.
	Model string
	// Tenant is the tenant the request belongs to.
	Tenant string
	// SessionKey identifies the conversation ("" for a sessionless request).
	SessionKey string
	// PromptTokens is the gateway's estimate of the prompt length.
	PromptTokens int
	// ExpectedOutputTokens is the request's output budget (max tokens).
	ExpectedOutputTokens int
	// Interactive marks a turn of the interactive band (see the
	// interactive-lane filter).
	Interactive bool
	// Hashes is the prompt's chained block hashes, when the policy asked
	// for them (see NeedsHashes); nil otherwise. The gateway owns the
	// slice and must keep it unchanged until the last Done.
	Hashes []kv.BlockHash
	// Prefill: the pick is a prefill leg's, among prefill endpoints.
	Prefill bool
	// Band is the turn's flow-control band ("interactive", "standard",
	// "background"), whose TTFT target the price scorer holds to; ""
	// means interactive when Interactive is set, else standard.
	Band string

	// Routing is what the last Pick decided, kept here for Done. The
	// policy writes it; the gateway leaves it alone.
	Routing Routing
	// picker is the policy that made the last Pick under a Reloadable,
	// which Done goes to.
	picker Policy
}

// Routing is a policy's note, in the Request, of what its last Pick
// decided.
type Routing struct {
	// Endpoint is the endpoint picked; nil before Pick.
	Endpoint *pools.Endpoint
	// CachedBlocks is how many blocks of Hashes the index said the endpoint
	// held when it was picked: the prediction Done checks against the
	// engine's cached tokens.
	CachedBlocks int
	// BestOtherBlocks is the most blocks of Hashes any other candidate
	// held; LowerTierBlocks how many of the CachedBlocks the endpoint held
	// only below HBM; Stale that its entries were marked stale.
	BestOtherBlocks, LowerTierBlocks int
	Stale                            bool
	// EngineRemovals is the endpoint's kv.Index.EngineRemovals at the
	// pick, which Done reads again to tell whether the engine evicted
	// anything since; BlockSize the index's tokens a block (0: no index
	// was consulted).
	EngineRemovals uint64
	BlockSize      int
	// Recorded reports that Pick recorded Hashes in the index on Endpoint
	// ahead of the engine, which Done undoes if the request failed.
	Recorded bool
	// Prediction is the time to first token predicted on Endpoint when it
	// was picked, which Done learns from.
	Prediction Prediction
	// At is when Endpoint was picked: Done times the answer from it.
	At time.Time
}

// NeedsHashes reports whether p scores by prompt prefix, so that the
// gateway must fill Request.Hashes before Pick. Policies say so by
// implementing interface{ NeedsHashes() bool }.
func NeedsHashes(p Policy) bool {
	h, ok := p.(interface{ NeedsHashes() bool })
	return ok && h.NeedsHashes()
}

// Outcome is what happened to a routed request, reported to Done.
type Outcome struct {
	// Err is nil when the engine answered.
	Err error
	// PromptTokens, CachedTokens and CompletionTokens come from the
	// engine's usage, when known.
	PromptTokens, CachedTokens, CompletionTokens int
	// TTFT is the time to the first streamed token; zero when unknown (a
	// non-streamed answer).
	TTFT time.Duration
}

// Policy picks the endpoint for a request. Implementations are safe for
// concurrent use.
type Policy interface {
	// Name is the policy's config name, e.g. "least-loaded".
	Name() string
	// Pick chooses one of candidates (never empty) or returns
	// ErrNoEndpoint. It must not retain candidates.
	Pick(ctx context.Context, req *Request, candidates []*pools.Endpoint) (*pools.Endpoint, error)
	// Done reports the outcome of a request Pick routed to ep.
	Done(req *Request, ep *pools.Endpoint, o Outcome)
}

// LeastLoaded picks the available endpoint with the fewest requests in
// flight from this gateway, round-robin among ties.
type LeastLoaded struct {
	next atomic.Uint64
}

// Name implements Policy.
func (*LeastLoaded) Name() string { return "least-loaded" }

// Pick implements Policy.
func (l *LeastLoaded) Pick(_ context.Context, _ *Request, candidates []*pools.Endpoint) (*pools.Endpoint, error) {
	start := int(l.next.Add(1) % uint64(len(candidates)))
	var best *pools.Endpoint
	var bestLoad int64
	for i := range candidates {
		ep := candidates[(start+i)%len(candidates)]
		if !ep.Available() {
			continue
		}
		if n := ep.InFlight(); best == nil || n < bestLoad {
			best, bestLoad = ep, n
		}
	}
	if best == nil {
		return nil, ErrNoEndpoint
	}
	return best, nil
}

// Done implements Policy.
func (*LeastLoaded) Done(*Request, *pools.Endpoint, Outcome) {}

// RoundRobin cycles through the available endpoints, blind to load and
// cache: what a plain Kubernetes Service gives.
type RoundRobin struct {
	next atomic.Uint64
}

// Name implements Policy.
func (*RoundRobin) Name() string { return "round-robin" }

// Pick implements Policy.
func (r *RoundRobin) Pick(_ context.Context, _ *Request, candidates []*pools.Endpoint) (*pools.Endpoint, error) {
	start := int(r.next.Add(1) % uint64(len(candidates)))
	for i := range candidates {
		if ep := candidates[(start+i)%len(candidates)]; ep.Available() {
			return ep, nil
		}
	}
	return nil, ErrNoEndpoint
}

// Done implements Policy.
func (*RoundRobin) Done(*Request, *pools.Endpoint, Outcome) {}

var (
	_ Policy = (*LeastLoaded)(nil)
	_ Policy = (*RoundRobin)(nil)
)
