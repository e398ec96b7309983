package models

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Config is the models: section: rewrite rules and aliases. The zero
// Config rewrites nothing.
type Config struct {
	// Aliases map a name clients use to the served model that answers it,
	// as a rule matching only the name with one target would, named
	// "alias:<name>". Rules are tried first. Default none.
	Aliases map[string]string `yaml:"aliases"`
	// Rules are tried in order; the first whose Match holds picks a
	// target. Default none.
	Rules []RuleConfig `yaml:"rules"`
}

// RuleConfig is one rewrite rule.
type RuleConfig struct {
	// Name names the rule in the x-turnpike-model-rule response header
	// and in the metrics. Required, unique, not starting with "alias:".
	Name string `yaml:"name"`
	// Match says which requests the rule takes.
	Match Match `yaml:"match"`
	// Targets are the served models the rule sends requests to, split
	// by weight. At least one.
	Targets []Target `yaml:"targets"`
}

// Match is what a request must carry for a rule to take it. Every field
// set must hold.
type Match struct {
	// Model is the model name the client sent, matched exactly. Required.
	Model string `yaml:"model"`
	// Header, when Name is set, is a request header that must have
	// Value (exactly; the name in any case). Default none.
	Header HeaderMatch `yaml:"header"`
	// Tenant, when set, is the only tenant the rule takes. Default any.
	Tenant string `yaml:"tenant"`
}

// HeaderMatch is a request header and the value it must have.
type HeaderMatch struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// Target is a served model a rule sends a share of its requests to.
type Target struct {
	// Model is the served model's name. Required.
	Model string `yaml:"model"`
	// Weight is the target's share against the rule's other targets: a
	// 90/10 split is weights 90 and 10. Either every target of a rule has
	// a weight or none has (an even split). Default none.
	Weight int `yaml:"weight"`
	// Fallbacks are served models tried in order when Model has no
	// endpoint or its flow control sheds the turn, before the first byte
	// of an answer only. Default none.
	Fallbacks []string `yaml:"fallbacks"`
}

// aliasPrefix starts the name of an alias's rule.
const aliasPrefix = "alias:"

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("models: "+format, args...))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Aliases)) {
		target := c.Aliases[name]
		switch {
		case name == "":
			bad("aliases: an alias needs a name")
		case target == "":
			bad("aliases.%s: needs a target model", name)
		case target == name:
			bad("aliases.%s: is its own target", name)
		}
	}
	names := map[string]bool{}
	for i := range c.Rules {
		r := &c.Rules[i]
		where := fmt.Sprintf("rules[%d]", i)
		switch {
		case r.Name == "":
			bad("%s.name: required", where)
		case strings.HasPrefix(r.Name, aliasPrefix):
			bad("%s.name: %q: names starting with %q are the aliases'", where, r.Name, aliasPrefix)
		case names[r.Name]:
			bad("%s.name: %q is used by an earlier rule", where, r.Name)
		default:
			where = fmt.Sprintf("rules[%s]", r.Name)
		}
		names[r.Name] = true
		if r.Match.Model == "" {
			bad("%s.match.model: required", where)
		}
		if r.Match.Header.Name == "" && r.Match.Header.Value != "" {
			bad("%s.match.header: a value needs a header name", where)
		}
		if len(r.Targets) == 0 {
			bad("%s.targets: at least one is required", where)
		}
		weighted := 0
		for j := range r.Targets {
			tg := &r.Targets[j]
			at := fmt.Sprintf("%s.targets[%d]", where, j)
			if tg.Model == "" {
				bad("%s.model: required", at)
			}
			switch {
			case tg.Weight < 0:
				bad("%s.weight: %d: must not be negative", at, tg.Weight)
			case tg.Weight > maxWeight:
				bad("%s.weight: %d: at most %d", at, tg.Weight, maxWeight)
			case tg.Weight > 0:
				weighted++
			}
			seen := map[string]bool{tg.Model: true}
			for k, fb := range tg.Fallbacks {
				switch {
				case fb == "":
					bad("%s.fallbacks[%d]: empty model name", at, k)
				case seen[fb]:
					bad("%s.fallbacks[%d]: %q is tried already", at, k, fb)
				}
				seen[fb] = true
			}
		}
		if weighted != 0 && weighted != len(r.Targets) {
			bad("%s.targets: give every target a weight, or none (an even split)", where)
		}
	}
	return errors.Join(errs...)
}

// maxWeight bounds a target's weight, so that a rule's total fits any int.
const maxWeight = 1_000_000
