package models

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
)

// Request is what a rule may match on.
type Request struct {
	// Model is the model name the client sent.
	Model string
	// Tenant owns the request.
	Tenant string
	// Header is the client's request header; nil has none.
	Header http.Header
	// Session is the request's session key; "" picks a weighted target at
	// random.
	Session string
}

// Route is where a request goes.
type Route struct {
	// Rule names the rule that took the request.
	Rule string
	// Model is the served model picked.
	Model string
	// Fallbacks are the served models to try after Model, in order. The
	// Table's: never written.
	Fallbacks []string
}

// Alias is a model name a rule takes, as /v1/models lists it.
type Alias struct {
	// Name is the name clients send.
	Name string
	// Target is the served model that answers it: the heaviest target of
	// the first rule naming it.
	Target string
}

// Table is a compiled Config. Build it with New; it is immutable. A nil
// *Table rewrites nothing.
type Table struct {
	rules []rule
	// byModel lists, by model name, the rules that may take it, in order.
	byModel map[string][]*rule
	// targets lists, by model name, every served model its rules may send
	// it to, fallbacks included, first seen first.
	targets map[string][]string
	aliases []Alias
}

type rule struct {
	name, model, tenant string
	// header is the header name in canonical form, "" for none.
	header, value string
	targets       []target
	// total is the sum of the weights; seed mixes the rule's name into a
	// session's draw, so that a session's picks under two rules are not
	// bound together.
	total int
	seed  uint64
}

type target struct {
	model     string
	weight    int
	fallbacks []string
}

// New compiles cfg, which must Validate.
func New(cfg Config) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Table{byModel: map[string][]*rule{}, targets: map[string][]string{}}
	for _, rc := range cfg.Rules {
		r := rule{
			name: rc.Name, model: rc.Match.Model, tenant: rc.Match.Tenant,
			value: rc.Match.Header.Value, seed: hashString(fnvOffset, rc.Name),
		}
		if rc.Match.Header.Name != "" {
			r.header = http.CanonicalHeaderKey(rc.Match.Header.Name)
		}
		even := rc.Targets[0].Weight == 0
		for _, tc := range rc.Targets {
			w := tc.Weight
			if even {
				w = 1
			}
			r.targets = append(r.targets, target{model: tc.Model, weight: w, fallbacks: slices.Clone(tc.Fallbacks)})
			r.total += w
		}
		t.rules = append(t.rules, r)
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Aliases)) {
		t.rules = append(t.rules, rule{
			name: aliasPrefix + name, model: name, total: 1,
			targets: []target{{model: cfg.Aliases[name], weight: 1}},
		})
	}
	for i := range t.rules {
		r := &t.rules[i]
		if t.byModel[r.model] == nil {
			heaviest := slices.MaxFunc(r.targets, func(a, b target) int { return cmp.Compare(a.weight, b.weight) })
			t.aliases = append(t.aliases, Alias{Name: r.model, Target: heaviest.model})
		}
		t.byModel[r.model] = append(t.byModel[r.model], r)
		for _, tg := range r.targets {
			for _, m := range append([]string{tg.model}, tg.fallbacks...) {
				if !slices.Contains(t.targets[r.model], m) {
					t.targets[r.model] = append(t.targets[r.model], m)
				}
			}
		}
	}
	return t, nil
}

// Resolve routes req: the first rule that takes it and the target picked.
// ok is false when no rule takes it (the model is sent as named).
func (t *Table) Resolve(req *Request) (_ Route, ok bool) {
	return t.resolve(req, rand.Uint64)
}

// resolve is Resolve with the random draw of a request with no session
// drawn from draw.
func (t *Table) resolve(req *Request, draw func() uint64) (Route, bool) {
	r := t.match(req)
	if r == nil {
		return Route{}, false
	}
	tg := &r.targets[0]
	if len(r.targets) > 1 {
		var d uint64
		if req.Session != "" {
			d = mix(hashString(r.seed, req.Session))
		} else {
			d = draw()
		}
		tg = r.pick(d)
	}
	return Route{Rule: r.name, Model: tg.model, Fallbacks: tg.fallbacks}, true
}

// Rule names the rule that takes req, "" if none does.
func (t *Table) Rule(req *Request) string {
	if r := t.match(req); r != nil {
		return r.name
	}
	return ""
}

// Targets are the served models a rule may send model to, fallbacks
// included, first seen first; nil when no rule names model. The Table's:
// never written.
func (t *Table) Targets(model string) []string {
	if t == nil {
		return nil
	}
	return t.targets[model]
}

// Aliases lists each model name a rule takes, in the order of the rules
// (the aliases' last, by name), with its target.
func (t *Table) Aliases() []Alias {
	if t == nil {
		return nil
	}
	return slices.Clone(t.aliases)
}

func (t *Table) match(req *Request) *rule {
	if t == nil {
		return nil
	}
	for _, r := range t.byModel[req.Model] {
		if r.tenant != "" && r.tenant != req.Tenant {
			continue
		}
		// The header is read as http.Header.Get would, without
		// canonicalising the name again.
		if r.header != "" {
			if v := req.Header[r.header]; len(v) == 0 || v[0] != r.value {
				continue
			}
		}
		return r
	}
	return nil
}

// pick is the target that draw d falls on, each taking weight/total of
// the draws.
func (r *rule) pick(d uint64) *target {
	n := int(d % uint64(r.total))
	for i := range r.targets {
		if n < r.targets[i].weight {
			return &r.targets[i]
		}
		n -= r.targets[i].weight
	}
	panic("models: a draw past the rule's total weight")
}

// FNV-1a, 64 bits: the same on every gateway, so that a session picks the
// same target whichever gateway its turns reach.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// mix is splitmix64's finaliser: FNV's low bits, which the modulo reads,
// are weak.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
