package affinity

import (
	"context"
	"errors"

	"github.com/turnpike-gateway/turnpike/pools"
)

// Chooser is a policy that can say where a request would go without
// routing it there: nothing recorded in the index, no session pinned, no
// load counted. The hand-off of a draining endpoint's sessions asks it
// where each session's next turn would be served best.
type Chooser interface {
	// Choose returns the endpoint of candidates (never empty) that Pick
	// would choose for req now, and how many blocks of req.Hashes the
	// index says it holds.
	Choose(ctx context.Context, req *Request, candidates []*pools.Endpoint) (ep *pools.Endpoint, cachedBlocks int, err error)
}

// errChosen is the outcome Choose reports to a policy that only picks:
// the request was never sent.
var errChosen = errors.New("affinity: chosen, not sent")

// Choose asks p where req would go among candidates, without routing it
// when p is a Chooser; another policy picks, and hears at once that the
// request was not sent (no policy but cache-aware keeps anything of a
// pick).
func Choose(ctx context.Context, p Policy, req *Request, candidates []*pools.Endpoint) (*pools.Endpoint, int, error) {
	if c, ok := p.(Chooser); ok {
		return c.Choose(ctx, req, candidates)
	}
	ep, err := p.Pick(ctx, req, candidates)
	if err != nil {
		return nil, 0, err
	}
	p.Done(req, ep, Outcome{Err: errChosen})
	return ep, 0, nil
}

// Choose implements Chooser: Pick's filters, scorers and picker, with the
// session's pin, and none of its records.
func (p *CacheAware) Choose(ctx context.Context, req *Request, candidates []*pools.Endpoint) (*pools.Endpoint, int, error) {
	now := p.now()
	c := newCycle(req, candidates, now)
	defer c.release()
	c.BlockSize = p.blockSize
	if req.SessionKey != "" && p.sessions != nil {
		c.PinnedID, _ = p.sessions.Pinned(req.Tenant, req.SessionKey, now)
	}
	if p.index != nil && len(req.Hashes) > 0 {
		p.matchPrefix(c, candidates, false)
	}
	ep, err := p.pipe.run(ctx, c, false)
	if err != nil {
		return nil, 0, err
	}
	return ep, c.match(ep).Blocks, nil
}

// Choose implements Chooser with the current policy.
func (r *Reloadable) Choose(ctx context.Context, req *Request, candidates []*pools.Endpoint) (*pools.Endpoint, int, error) {
	return Choose(ctx, r.Current(), req, candidates)
}

// MixedRevisions reports whether eps hold endpoints of more than one
// revision: only then does a turn's revision narrow its candidates.
func MixedRevisions(eps []*pools.Endpoint) bool {
	return len(eps) > 1 && !oneRevision(eps)
}

var (
	_ Chooser = (*CacheAware)(nil)
	_ Chooser = (*Reloadable)(nil)
)
