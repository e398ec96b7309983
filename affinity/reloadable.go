package affinity

import (
	"context"
	"sync/atomic"

	"github.com/turnpike-gateway/turnpike/pools"
)

// Reloadable is a Policy that a reload of the config replaces while turns
// run: each Pick goes to the policy in force, and each Done to the policy
// that made the request's last Pick, so that a policy is never told the
// outcome of a pick it did not make. A replaced policy finishes the picks
// it made and is then dropped; what it had learned (a cache-aware
// policy's per-endpoint estimates) is not carried over.
//
// It says it needs hashes whatever the policy in force: the gateway
// decides once whether to hash prompts, and the next policy may score by
// prefix.
type Reloadable struct {
	cur atomic.Pointer[policyBox]
}

// policyBox holds a Policy, an interface, for atomic.Pointer.
type policyBox struct{ p Policy }

// NewReloadable puts p in force.
func NewReloadable(p Policy) *Reloadable {
	r := &Reloadable{}
	r.Set(p)
	return r
}

// Set puts p in force for the picks that follow.
func (r *Reloadable) Set(p Policy) { r.cur.Store(&policyBox{p}) }

// Current is the policy in force.
func (r *Reloadable) Current() Policy { return r.cur.Load().p }

// Name implements Policy: the name of the policy in force.
func (r *Reloadable) Name() string { return r.Current().Name() }

// NeedsHashes reports true: see Reloadable.
func (r *Reloadable) NeedsHashes() bool { return true }

// Pick implements Policy.
func (r *Reloadable) Pick(ctx context.Context, req *Request, candidates []*pools.Endpoint) (*pools.Endpoint, error) {
	p := r.Current()
	ep, err := p.Pick(ctx, req, candidates)
	req.picker = p
	return ep, err
}

// Done implements Policy.
func (r *Reloadable) Done(req *Request, ep *pools.Endpoint, o Outcome) {
	p := req.picker
	if p == nil {
		p = r.Current()
	}
	p.Done(req, ep, o)
}

// CacheAccuracy is the policy in force's account of ep's predictions
// (CacheAware.CacheAccuracy); false for a policy that keeps none.
func (r *Reloadable) CacheAccuracy(ep *pools.Endpoint) (CacheAccuracy, bool) {
	return CacheAccuracyOf(r.Current(), ep)
}

var _ Policy = (*Reloadable)(nil)
