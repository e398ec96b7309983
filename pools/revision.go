package pools

import (
	"errors"
	"fmt"
	"slices"
)

// RevisionPolicy is routing.revisions.<model>: where the new sessions of a
// model go while endpoints of several revisions serve it (a rolling update,
// a canary). A session keeps the revision of the endpoint it is pinned to
// while that endpoint serves; only a session without one (new, or whose
// endpoint left) is assigned a revision by the policy.
type RevisionPolicy struct {
	// Weights share new sessions among revisions, each session by a hash
	// of its key, so that it keeps its revision: {new: 10, old: 90} sends
	// one new session in ten to revision "new". Revisions serving the
	// model that are not listed take none while a listed one serves. A
	// weight is a whole number, at least 0. Empty: every new session goes
	// to Prefer.
	Weights map[string]int `yaml:"weights,omitempty" json:"weights,omitempty"`
	// Prefer is the revision new sessions go to when Weights is empty or
	// none of its revisions serves. "" (the default) means the newest:
	// the revision of the endpoint that joined the fleet last.
	Prefer string `yaml:"prefer,omitempty" json:"prefer,omitempty"`
}

// Validate reports every problem of p at once.
func (p *RevisionPolicy) Validate() error {
	var errs []error
	names := make([]string, 0, len(p.Weights))
	for name := range p.Weights {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if name == "" {
			errs = append(errs, errors.New("pools: revisions.weights: a revision is named"))
		}
		if w := p.Weights[name]; w < 0 {
			errs = append(errs, fmt.Errorf("pools: revisions.weights[%s] %d is negative", name, w))
		}
	}
	return errors.Join(errs...)
}
