package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"

	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
	"github.com/turnpike-gateway/turnpike/models"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// ModelRuleHeader names, in a response, the models rule that rewrote the
// request's model (models.Route.Rule).
const ModelRuleHeader = "X-Turnpike-Model-Rule"

// SetModels replaces the model rewrites (aliases, rules) every turn from
// now on is resolved by; nil rewrites none. Turns begun keep theirs.
func (d *Dispatcher) SetModels(t *models.Table) { d.models.Store(t) }

// Models is the model rewrites in force; nil when none.
func (d *Dispatcher) Models() *models.Table { return d.models.Load() }

// ModelRule names the rule that rewrites the model a tenant's request
// names, "" when none does: what ModelRuleHeader says.
func (d *Dispatcher) ModelRule(tenant, model string, header http.Header) string {
	return d.models.Load().Rule(&models.Request{Model: model, Tenant: tenant, Header: header})
}

// served is the served model whose pools answer for model before a turn
// picks its target: model itself when a pool serves it, else the first of
// its rules' targets a pool serves; "" when none.
func (d *Dispatcher) served(model string) string {
	if d.capacityOf(model) != nil {
		return model
	}
	for _, m := range d.models.Load().Targets(model) {
		if d.capacity[m] != nil {
			return m
		}
	}
	return ""
}

// beginRouted begins spec on the route its rules give it: on the target
// picked, else, while the target has no endpoint or flow control sheds
// the turn, on each of the target's fallbacks in order. Nothing has been
// sent to the client then: Begin returns before the first byte.
func (d *Dispatcher) beginRouted(ctx context.Context, spec *Spec, key string, route models.Route) (*Turn, error) {
	var err error
	for i := -1; i < len(route.Fallbacks); i++ {
		model := route.Model
		if i >= 0 {
			model = route.Fallbacks[i]
			d.fallbacks.Inc()
			d.log.Debug("model falls back", "rule", route.Rule, "from", route.Model, "to", model, "err", err)
		}
		var s *Spec
		if s, err = d.rewritten(spec, model); err != nil {
			return nil, err
		}
		var t *Turn
		if t, err = d.begin(ctx, s, key); err == nil || ctx.Err() != nil || !fallsBack(err) {
			return t, err
		}
	}
	return nil, err
}

// fallsBack: err says the model could not take the turn at all (no
// endpoint, not served, shed), so that another model may.
func fallsBack(err error) bool {
	var shed *ShedError
	return errors.Is(err, ErrNoEndpoint) || errors.Is(err, ErrModelNotFound) || errors.As(err, &shed)
}

// rewritten is a copy of spec for model: the body's model member set to
// it; the prompt counted again unless model's tokenizer is spec.Model's.
// spec itself is left as its caller made it.
func (d *Dispatcher) rewritten(spec *Spec, model string) (*Spec, error) {
	s := *spec
	s.Model = model
	if model == spec.Model {
		return &s, nil
	}
	quoted, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	if s.Body, err = jsonscan.Edit(spec.Body, []jsonscan.Member{{Key: "model", Value: quoted}}); err != nil {
		// Not a JSON object: sent as it came, for the engine to refuse.
		s.Body = spec.Body
	}
	if s.Prompt != nil && !sameTokenizer(d.Tokenizer(spec.Model), d.Tokenizer(model)) {
		s.Tokens, s.PromptTokens = nil, 0
	}
	return &s, nil
}

// sameTokenizer reports whether a and b are the one tokenizer; tokenizers
// whose type cannot be compared are taken as different.
func sameTokenizer(a, b prompt.Tokenizer) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && (ta == nil || ta.Comparable()) && a == b
}
