package affinity

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/turnpike-gateway/turnpike/pools"
)

// RevisionPolicy is where the new sessions of a model go while several
// revisions serve it (see pools.RevisionPolicy).
type RevisionPolicy = pools.RevisionPolicy

// revisionRule is a RevisionPolicy compiled for the routing path: the
// weighted revisions sorted by name.
type revisionRule struct {
	policy  RevisionPolicy
	names   []string
	weights []int
}

// Revisions is the table of RevisionPolicy by model, read on every turn and
// changed at runtime (the admin API). It is safe for concurrent use: the
// table is an immutable snapshot, replaced whole by Set.
type Revisions struct {
	rules atomic.Pointer[map[string]*revisionRule]
	// rand draws the revision of a sessionless request.
	rand func() uint64
}

// NewRevisions builds the table from the config's policies.
func NewRevisions(policies map[string]RevisionPolicy) (*Revisions, error) {
	r := &Revisions{rand: rand.Uint64}
	m := map[string]*revisionRule{}
	var errs []error
	for _, model := range slices.Sorted(maps.Keys(policies)) {
		p := policies[model]
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", model, err))
			continue
		}
		m[model] = compileRevisions(p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.rules.Store(&m)
	return r, nil
}

func compileRevisions(p RevisionPolicy) *revisionRule {
	rule := &revisionRule{policy: RevisionPolicy{Prefer: p.Prefer}}
	if len(p.Weights) > 0 {
		rule.policy.Weights = maps.Clone(p.Weights)
	}
	for _, name := range slices.Sorted(maps.Keys(p.Weights)) {
		if w := p.Weights[name]; w > 0 {
			rule.names = append(rule.names, name)
			rule.weights = append(rule.weights, w)
		}
	}
	return rule
}

// Policy returns model's policy, and whether it has one.
func (r *Revisions) Policy(model string) (RevisionPolicy, bool) {
	if r == nil {
		return RevisionPolicy{}, false
	}
	rule, ok := (*r.rules.Load())[model]
	if !ok {
		return RevisionPolicy{}, false
	}
	p := rule.policy
	p.Weights = maps.Clone(p.Weights)
	return p, true
}

// Policies returns every model's policy.
func (r *Revisions) Policies() map[string]RevisionPolicy {
	out := map[string]RevisionPolicy{}
	for model := range *r.rules.Load() {
		out[model], _ = r.Policy(model)
	}
	return out
}

// Set replaces model's policy from now on; a zero p removes it (new
// sessions then go to the newest revision). Sessions already assigned keep
// their endpoints; only sessions assigned from now on follow p.
func (r *Revisions) Set(model string, p RevisionPolicy) error {
	if model == "" {
		return errors.New("affinity: revisions: a model is named")
	}
	if err := p.Validate(); err != nil {
		return err
	}
	for {
		old := r.rules.Load()
		m := maps.Clone(*old)
		if len(p.Weights) == 0 && p.Prefer == "" {
			delete(m, model)
		} else {
			m[model] = compileRevisions(p)
		}
		if r.rules.CompareAndSwap(old, &m) {
			return nil
		}
	}
}

// Assign returns the revision a new session, key, of model goes to among
// the available endpoints of candidates: by Weights (the hash of key
// against the weights of the revisions that serve), else Prefer when it
// serves, else the newest. "" when none is available.
func (r *Revisions) Assign(model, key string, candidates []*pools.Endpoint) string {
	var rule *revisionRule
	if r != nil {
		rule = (*r.rules.Load())[model]
	}
	if rule != nil && len(rule.names) > 0 {
		total := 0
		for i, name := range rule.names {
			if serves(candidates, name) {
				total += rule.weights[i]
			}
		}
		if total > 0 {
			x := r.draw(key) % uint64(total)
			for i, name := range rule.names {
				if !serves(candidates, name) {
					continue
				}
				if x < uint64(rule.weights[i]) {
					return name
				}
				x -= uint64(rule.weights[i])
			}
		}
	}
	if rule != nil && rule.policy.Prefer != "" && serves(candidates, rule.policy.Prefer) {
		return rule.policy.Prefer
	}
	return Newest(candidates)
}

// draw is the session's point on the weights: a hash of its key, mixed so
// that it does not follow the other splits made by the key's hash (the
// model rules', the session-hash ring's); a random one without a key.
func (r *Revisions) draw(key string) uint64 {
	if key == "" {
		return r.rand()
	}
	return mix(xxhash.Sum64String(key), 0x7265766973696f6e) // "revision"
}

// Newest is the revision of the available endpoint of eps that joined the
// fleet last (of the greatest name among those that joined at once); ""
// when none is available.
func Newest(eps []*pools.Endpoint) string {
	var best *pools.Endpoint
	for _, ep := range eps {
		if !ep.Available() {
			continue
		}
		if best == nil || cmp.Or(ep.Joined().Compare(best.Joined()), cmp.Compare(ep.Revision(), best.Revision())) > 0 {
			best = ep
		}
	}
	if best == nil {
		return ""
	}
	return best.Revision()
}

// serves reports whether an available endpoint of eps is of revision rev.
func serves(eps []*pools.Endpoint, rev string) bool {
	for _, ep := range eps {
		if ep.Available() && ep.Revision() == rev {
			return true
		}
	}
	return false
}

// Keep keeps of candidates, in place, those a turn of model's session key
// may go to: a session pinned to pinned, an available endpoint among
// candidates, stays on pinned's revision; any other goes to the revision
// Assign gives it. Candidates of one revision, or with no available
// endpoint of the revision chosen, are kept whole: a revision never leaves
// a turn without an endpoint.
func (r *Revisions) Keep(model, key string, pinned *pools.Endpoint, candidates []*pools.Endpoint) []*pools.Endpoint {
	if len(candidates) < 2 || oneRevision(candidates) {
		return candidates
	}
	var rev string
	if pinned != nil && pinned.Available() && slices.Contains(candidates, pinned) {
		rev = pinned.Revision()
	} else {
		rev = r.Assign(model, key, candidates)
	}
	if !serves(candidates, rev) {
		return candidates
	}
	n := 0
	for _, ep := range candidates {
		if ep.Revision() == rev {
			candidates[n] = ep
			n++
		}
	}
	clear(candidates[n:])
	return candidates[:n]
}

func oneRevision(eps []*pools.Endpoint) bool {
	for _, ep := range eps[1:] {
		if ep.Revision() != eps[0].Revision() {
			return false
		}
	}
	return true
}
