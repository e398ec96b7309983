package affinity

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestRevisionRollout: where the sessions of a model go while two
// revisions serve it, as a spec (testdata/revision_rollout).
func TestRevisionRollout(t *testing.T) {
	var (
		reg  *pools.Registry
		revs *Revisions
	)
	byID := func(t *testing.T, id string) *pools.Endpoint {
		ep, ok := reg.Endpoint(id)
		if !ok {
			t.Fatalf("no endpoint %s", id)
		}
		return ep
	}
	datadriven.RunTest(t, "testdata/revision_rollout", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "fleet":
			// One line an endpoint: host revision [joined=seconds] [down].
			var eps []pools.EndpointConfig
			var lines [][]string
			for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				f := strings.Fields(line)
				lines = append(lines, f)
				eps = append(eps, pools.EndpointConfig{URL: "http://" + f[0] + ":8000", Revision: f[1]})
			}
			var err error
			reg, err = pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: eps}}, pools.Options{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if revs == nil {
				revs, _ = NewRevisions(nil)
			}
			for i, f := range lines {
				ep := byID(t, f[0]+":8000")
				ep.SetJoined(t0.Add(time.Duration(i) * time.Second))
				for _, a := range f[2:] {
					switch {
					case strings.HasPrefix(a, "joined="):
						s, _ := strconv.Atoi(strings.TrimPrefix(a, "joined="))
						ep.SetJoined(t0.Add(time.Duration(s) * time.Second))
					case a == "down":
						ep.SetHealthy(false)
					}
				}
			}
			return describeFleet(reg.Endpoints())
		case "policy":
			// weights rev=w … and/or prefer=rev; nothing clears it.
			var p RevisionPolicy
			for _, a := range d.CmdArgs {
				if a.Key == "prefer" {
					p.Prefer = a.Vals[0]
					continue
				}
				w, err := strconv.Atoi(a.Vals[0])
				if err != nil {
					return "error: " + err.Error()
				}
				if p.Weights == nil {
					p.Weights = map[string]int{}
				}
				p.Weights[a.Key] = w
			}
			if err := revs.Set("m", p); err != nil {
				return "error: " + err.Error()
			}
			got, ok := revs.Policy("m")
			if !ok {
				return "none: the newest revision"
			}
			return fmt.Sprintf("weights=%v prefer=%q", got.Weights, got.Prefer)
		case "keep":
			// keep session=K [pinned=host]: the endpoints the turn may go to.
			var key, pinned string
			d.ScanArgs(t, "session", &key)
			if d.HasArg("pinned") {
				d.ScanArgs(t, "pinned", &pinned)
			}
			var pin *pools.Endpoint
			if pinned != "" {
				pin, _ = reg.Endpoint(pinned + ":8000")
			}
			kept := revs.Keep("m", key, pin, slices.Clone(reg.Endpoints()))
			return describeFleet(kept)
		case "share":
			// share sessions=N: how many of N new sessions each revision takes.
			var n int
			d.ScanArgs(t, "sessions", &n)
			count := map[string]int{}
			for i := range n {
				count[revs.Assign("m", fmt.Sprintf("session-%d", i), reg.Endpoints())]++
			}
			var out []string
			for _, rev := range slices.Sorted(maps.Keys(count)) {
				out = append(out, fmt.Sprintf("%s: %.0f%%", rev, 100*float64(count[rev])/float64(n)))
			}
			return strings.Join(out, "\n")
		}
		return "unknown command " + d.Cmd
	})
}

func describeFleet(eps []*pools.Endpoint) string {
	var out []string
	for _, ep := range eps {
		s := strings.TrimSuffix(ep.ID, ":8000") + " " + ep.Revision()
		if !ep.Available() {
			s += " (unavailable)"
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

// TestRevisionCanaryShare: weights new 10, old 90 send 10% ± 3% of 10,000
// new sessions to the new revision, each session always to the same one;
// a change of weights at runtime moves the share of the sessions assigned
// from then on.
func TestRevisionCanaryShare(t *testing.T) {
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: []pools.EndpointConfig{
		{URL: "http://a:8000", Revision: "old"}, {URL: "http://b:8000", Revision: "old"},
		{URL: "http://c:8000", Revision: "old"}, {URL: "http://d:8000", Revision: "new"},
	}}}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	revs, err := NewRevisions(map[string]RevisionPolicy{"m": {Weights: map[string]int{"new": 10, "old": 90}}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	share := func() float64 {
		onNew := 0
		for i := range n {
			key := fmt.Sprintf("sess-%d", i)
			rev := revs.Assign("m", key, reg.Endpoints())
			if rev != revs.Assign("m", key, reg.Endpoints()) {
				t.Fatalf("session %s assigned two revisions", key)
			}
			if rev == "new" {
				onNew++
			}
		}
		return float64(onNew) / n
	}
	if s := share(); s < 0.07 || s > 0.13 {
		t.Errorf("weights 10/90: %.1f%% of new sessions on the new revision, want 10%% ± 3%%", 100*s)
	}
	if err := revs.Set("m", RevisionPolicy{Weights: map[string]int{"new": 50, "old": 50}}); err != nil {
		t.Fatal(err)
	}
	if s := share(); s < 0.47 || s > 0.53 {
		t.Errorf("weights 50/50 set at runtime: %.1f%% on the new revision, want 50%% ± 3%%", 100*s)
	}
}

func TestRevisionPolicyValidate(t *testing.T) {
	_, err := NewRevisions(map[string]RevisionPolicy{"m": {Weights: map[string]int{"a": -1, "": 2}}})
	if err == nil || !strings.Contains(err.Error(), "negative") || !strings.Contains(err.Error(), "is named") {
		t.Errorf("NewRevisions: %v, want both problems", err)
	}
}
