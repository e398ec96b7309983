package affinity

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/turnpike-gateway/turnpike/pools"
)

func TestConfigDefaults(t *testing.T) {
	var c Config
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Policy != PolicyCacheAware || c.Picker != PickerMaxScore || len(c.Scorers) != len(DefaultScorers) ||
		c.LoadGuard.Factor != DefaultLoadGuardFactor || c.LoadGuard.Slack != DefaultLoadGuardSlack {
		t.Errorf("defaults = %+v", c)
	}
	c = Config{Scorers: []ScorerConfig{{Name: ScorerQueue}}}
	c.EnsureDefaults()
	if c.Scorers[0].Weight != DefaultQueueWeight {
		t.Errorf("zero weight became %v, want the default %v", c.Scorers[0].Weight, DefaultQueueWeight)
	}
}

func TestConfigValidateReportsEverything(t *testing.T) {
	c := Config{
		Policy:      "fastest",
		Filters:     []string{FilterHealthy, "lucky", FilterHealthy},
		Scorers:     []ScorerConfig{{Name: ScorerPrefix, Weight: -1}, {Name: "vibes", Weight: 1}, {Name: ScorerPrefix, Weight: math.NaN()}},
		Picker:      "first",
		LoadGuard:   LoadGuardConfig{Factor: 0.5, Slack: -1},
		TierWeights: map[string]float64{"tape": 0.1, "cpu": 2},
		MaxQueue:    -1,
		Smoothing:   3,
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		`unknown policy "fastest"`, `unknown filter "lucky"`, `filter "healthy" listed twice`,
		`weight -1 of "prefix"`, `unknown scorer "vibes"`, `scorer "prefix" listed twice`,
		`unknown picker "first"`, "loadGuard.factor 0.5", "loadGuard.slack -1",
		`unknown tier "tape"`, "tierWeights[cpu]: 2", "maxQueue -1", "smoothing 3",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
	if _, perr := NewPolicy(c, Deps{}); perr == nil {
		t.Error("NewPolicy accepted an invalid config")
	}
	fields := map[string]bool{}
	for _, fe := range pools.FieldErrors(err) {
		fields[fe.Field] = true
	}
	for _, want := range []string{"policy", "filters[1]", "filters[2]", "scorers[0]", "scorers[1]", "scorers[2]", "picker",
		"loadGuard.factor", "loadGuard.slack", "tierWeights", "tierWeights[cpu]", "maxQueue", "smoothing"} {
		if !fields[want] {
			t.Errorf("no FieldError for %s: %v", want, fields)
		}
	}
}

func TestConfigDecodes(t *testing.T) {
	const doc = `
policy: cache-aware
scorers:
  - {name: prefix, weight: 4}
  - {name: queue}
picker: weighted-random
loadGuard: {factor: 2, slack: 8}
tierWeights: {cpu: 0.7}
`
	var y Config
	if err := yaml.Unmarshal([]byte(doc), &y); err != nil {
		t.Fatal(err)
	}
	var j Config
	if err := json.Unmarshal([]byte(`{"policy":"cache-aware","scorers":[{"name":"prefix","weight":4},{"name":"queue"}],
		"picker":"weighted-random","loadGuard":{"factor":2,"slack":8},"tierWeights":{"cpu":0.7}}`), &j); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{y, j} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		if c.Scorers[0].Weight != 4 || c.Picker != PickerWeightedRandom || c.LoadGuard.Slack != 8 || c.tierWeights()[1] != 0.7 {
			t.Errorf("decoded %+v", c)
		}
	}
}

func TestNewPolicyByName(t *testing.T) {
	for _, name := range policyNames {
		p, err := NewPolicy(Config{Policy: name}, Deps{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != name {
			t.Errorf("NewPolicy(%q).Name() = %q", name, p.Name())
		}
	}
}
