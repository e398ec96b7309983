package models

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"go.yaml.in/yaml/v3"
)

// decode reads a models: section as the config file holds it, refusing
// unknown keys.
func decode(in string) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(strings.NewReader(in))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && err.Error() != "EOF" {
		return cfg, err
	}
	return cfg, nil
}

// TestRules runs the specification in testdata:
//
//	config                                  the YAML of a models: section; prints the problems
//	resolve model=M [tenant=T] [header=N:V] [session=S]
//	                                        the route: rule, model, fallbacks
//	split model=M n=N [seed=S] [sessions] [within=P]
//	                                        N picks, random from a seeded source or by N
//	                                        distinct session keys; each target's share,
//	                                        failing when it is more than P points off its weight
//	targets model=M                         every served model M may go to
//	aliases                                 the names the rules take, as /v1/models lists them
func TestRules(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var table *Table
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "config":
				cfg, err := decode(d.Input)
				if err != nil {
					return err.Error()
				}
				table, err = New(cfg)
				if err != nil {
					return err.Error()
				}
				return "ok"
			case "resolve":
				req := request(t, d)
				r, ok := table.Resolve(req)
				if !ok {
					if table.Rule(req) != "" {
						t.Fatal("Rule names a rule Resolve did not take")
					}
					return "no rule: " + req.Model + " as named"
				}
				if got := table.Rule(req); got != r.Rule {
					t.Fatalf("Rule says %q, Resolve %q", got, r.Rule)
				}
				out := fmt.Sprintf("%s → %s", r.Rule, r.Model)
				if len(r.Fallbacks) > 0 {
					out += " then " + strings.Join(r.Fallbacks, ", ")
				}
				return out
			case "split":
				return split(t, d, table)
			case "targets":
				var model string
				d.ScanArgs(t, "model", &model)
				return fmt.Sprint(table.Targets(model))
			case "aliases":
				var b strings.Builder
				for _, a := range table.Aliases() {
					fmt.Fprintf(&b, "%s → %s\n", a.Name, a.Target)
				}
				return b.String()
			}
			t.Fatalf("unknown command %s", d.Cmd)
			return ""
		})
	})
}

func request(t *testing.T, d *datadriven.TestData) *Request {
	req := &Request{}
	d.ScanArgs(t, "model", &req.Model)
	d.MaybeScanArgs(t, "tenant", &req.Tenant)
	d.MaybeScanArgs(t, "session", &req.Session)
	if d.HasArg("header") {
		var h string
		d.ScanArgs(t, "header", &h)
		name, value, _ := strings.Cut(h, ":")
		req.Header = http.Header{}
		req.Header.Set(name, value)
	}
	return req
}

// split picks n times and prints each target's share of the picks.
func split(t *testing.T, d *datadriven.TestData, table *Table) string {
	req := request(t, d)
	var n int
	seed := uint64(1)
	d.ScanArgs(t, "n", &n)
	d.MaybeScanArgs(t, "seed", &seed)
	src := rand.New(rand.NewPCG(seed, seed))
	picks := map[string]int{}
	for i := range n {
		if d.HasArg("sessions") {
			req.Session = fmt.Sprintf("session-%d", i)
		}
		r, ok := table.resolve(req, src.Uint64)
		if !ok {
			t.Fatalf("no rule takes %s", req.Model)
		}
		picks[r.Model]++
	}
	rule := table.byModel[req.Model][0]
	var b strings.Builder
	for _, tg := range rule.targets {
		share := 100 * float64(picks[tg.model]) / float64(n)
		want := 100 * float64(tg.weight) / float64(rule.total)
		fmt.Fprintf(&b, "%s: %.0f%% (weight %.0f%%)\n", tg.model, share, want)
		if d.HasArg("within") {
			var within float64
			d.ScanArgs(t, "within", &within)
			if share < want-within || share > want+within {
				t.Errorf("%s: %.1f%% of the picks, want %.0f%% ± %.0f", tg.model, share, want, within)
			}
		}
	}
	return b.String()
}

// TestSessionKeepsItsTarget: every turn of a session lands on the target
// its first did, whatever the random draw.
func TestSessionKeepsItsTarget(t *testing.T) {
	table, err := New(Config{Rules: []RuleConfig{{
		Name: "split", Match: Match{Model: "m"},
		Targets: []Target{{Model: "a", Weight: 50}, {Model: "b", Weight: 50}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	src := rand.New(rand.NewPCG(7, 7))
	for i := range 100 {
		req := &Request{Model: "m", Session: fmt.Sprintf("s%d", i)}
		first, _ := table.resolve(req, src.Uint64)
		for range 10 {
			if r, _ := table.resolve(req, src.Uint64); r.Model != first.Model {
				t.Fatalf("session %s: %s, then %s", req.Session, first.Model, r.Model)
			}
		}
	}
}

// TestResolveDoesNotAllocate: Resolve is on every turn's path.
func TestResolveDoesNotAllocate(t *testing.T) {
	table, err := New(Config{
		Aliases: map[string]string{"gpt-4.1": "Qwen/Qwen3-32B"},
		Rules: []RuleConfig{{
			Name: "canary", Match: Match{Model: "gpt-4.1", Header: HeaderMatch{Name: "x-canary", Value: "1"}},
			Targets: []Target{{Model: "a", Weight: 90, Fallbacks: []string{"c"}}, {Model: "b", Weight: 10}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []*Request{
		{Model: "gpt-4.1", Header: http.Header{"X-Canary": {"1"}}, Session: "s"},
		{Model: "gpt-4.1", Header: http.Header{"X-Canary": {"1"}}},
		{Model: "gpt-4.1"},
		{Model: "other"},
	}
	for _, req := range reqs {
		if n := testing.AllocsPerRun(100, func() { table.Resolve(req) }); n != 0 {
			t.Errorf("%+v: %.0f allocations", req, n)
		}
	}
}

// FuzzConfig feeds the parser and the compiler any models: section: a
// config that validates compiles, and every route it gives goes to one
// of the targets its rules name.
func FuzzConfig(f *testing.F) {
	f.Add([]byte("aliases: {gpt-4.1: Qwen/Qwen3-32B}\n"), "gpt-4.1", "s")
	f.Add([]byte("rules:\n- name: r\n  match: {model: m, header: {name: x, value: y}, tenant: t}\n  targets:\n  - {model: a, weight: 90, fallbacks: [c]}\n  - {model: b, weight: 10}\n"), "m", "")
	f.Add([]byte("rules:\n- name: r\n  match: {model: m}\n  targets: [{model: a, weight: -1}]\n"), "m", "")
	f.Fuzz(func(t *testing.T, in []byte, model, session string) {
		cfg, err := decode(string(in))
		if err != nil {
			return
		}
		table, err := New(cfg)
		if err != nil {
			if cfg.Validate() == nil {
				t.Fatalf("New refused a config that validates: %v", err)
			}
			return
		}
		req := &Request{Model: model, Session: session, Header: http.Header{"X": {"y"}}, Tenant: "t"}
		r, ok := table.Resolve(req)
		if !ok {
			return
		}
		targets := table.Targets(model)
		if !slices.Contains(targets, r.Model) {
			t.Fatalf("routed %s to %s, not among %v", model, r.Model, targets)
		}
		for _, fb := range r.Fallbacks {
			if !slices.Contains(targets, fb) {
				t.Fatalf("fallback %s of %s not among %v", fb, model, targets)
			}
		}
	})
}
