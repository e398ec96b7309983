package admin

import (
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/turnpike-gateway/turnpike/pools"
)

// Revisions is where the new sessions of each model go while several
// revisions serve it (affinity.Revisions, the dispatcher's table).
type Revisions interface {
	// Policy is model's policy, and whether it has one.
	Policy(model string) (pools.RevisionPolicy, bool)
	// Set replaces model's policy for the sessions assigned from now on;
	// a zero policy removes it.
	Set(model string, p pools.RevisionPolicy) error
}

// ModelRevisions is a model's revision policy as the API shows it, with
// the revisions serving it now.
type ModelRevisions struct {
	Model string `json:"model"`
	pools.RevisionPolicy
	// Serving counts the endpoints of each revision serving the model
	// that take new requests ("" for those with none).
	Serving map[string]int `json:"serving"`
	// Newest is the revision of the endpoint that joined last, where new
	// sessions go with neither weights nor prefer.
	Newest string `json:"newest"`
}

// revisionsOf is model's policy and fleet, or a 404 for a model no pool
// serves.
func (s *Service) revisionsOf(c echo.Context) (ModelRevisions, error) {
	if s.deps.Revisions == nil {
		return ModelRevisions{}, unavailable("revision policies")
	}
	model := param(c, "model")
	if s.deps.Registry == nil || !slices.Contains(s.deps.Registry.Models(), model) {
		return ModelRevisions{}, notFoundf("model", "model_not_found", "No pool serves model %q.", model)
	}
	v := ModelRevisions{Model: model, Serving: map[string]int{}}
	v.RevisionPolicy, _ = s.deps.Revisions.Policy(model)
	var newest *pools.Endpoint
	for _, ep := range s.deps.Registry.Endpoints() {
		if !ep.Serves(model) || !ep.Available() {
			continue
		}
		v.Serving[ep.Revision()]++
		if newest == nil || ep.Joined().After(newest.Joined()) {
			newest = ep
		}
	}
	if newest != nil {
		v.Newest = newest.Revision()
	}
	return v, nil
}

func (s *Service) getRevisions(c echo.Context) error {
	v, err := s.revisionsOf(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

// putRevisions sets the model's weights and preferred revision, for the
// sessions assigned from now on; those pinned stay where they are. Not
// persisted: a restart takes the config file's again.
func (s *Service) putRevisions(c echo.Context) error {
	if _, err := s.revisionsOf(c); err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	var p pools.RevisionPolicy
	if err := decodeJSON(body, &p); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return invalidf("weights", "%v", err)
	}
	if err := s.deps.Revisions.Set(param(c, "model"), p); err != nil {
		return invalidf("", "%v", err)
	}
	s.log.Info("admin: revision policy changed", "model", param(c, "model"), "weights", p.Weights, "prefer", p.Prefer)
	return s.getRevisions(c)
}

// deleteRevisions removes the model's policy: new sessions go to the
// newest revision.
func (s *Service) deleteRevisions(c echo.Context) error {
	if _, err := s.revisionsOf(c); err != nil {
		return err
	}
	if err := s.deps.Revisions.Set(param(c, "model"), pools.RevisionPolicy{}); err != nil {
		return err
	}
	s.log.Info("admin: revision policy removed", "model", param(c, "model"))
	return s.getRevisions(c)
}
