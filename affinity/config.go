package affinity

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// Policy names.
const (
	PolicyCacheAware  = "cache-aware"
	PolicySessionHash = "session-hash"
	PolicyLeastLoaded = "least-loaded"
	PolicyRoundRobin  = "round-robin"
	// PolicyCostAware is cache-aware with the price scorer first
	// (CostAwareScorers): the cheapest pool while it meets the band's
	// TTFT target.
	PolicyCostAware = "cost-aware"
)

// Plugin names.
const (
	FilterHealthy       = "healthy"
	FilterBreakerClosed = "breaker-closed"
	FilterServesModel   = "serves-model"
	FilterHasRoom       = "has-room"
	FilterEngineRoom    = "engine-room"
	// FilterInteractiveLane reserves endpoints for the interactive band.
	FilterInteractiveLane = "interactive-lane"

	ScorerPrefix         = "prefix"
	ScorerSession        = "session"
	ScorerQueue          = "queue"
	ScorerKVUtilization  = "kv-utilization"
	ScorerInFlightTokens = "in-flight-tokens"
	ScorerPredictedTTFT  = "predicted-ttft"
	ScorerRoutedTokens   = "routed-tokens"
	// ScorerTTFTCost is the one cost of prefix and load: predicted time to
	// first token (TTFTModel).
	ScorerTTFTCost = "ttft-cost"
	// ScorerPrice is dollars per request under the band's TTFT target
	// (Price).
	ScorerPrice          = "price"
	PickerMaxScore       = "max-score"
	PickerWeightedRandom = "weighted-random"
	producerPrefixMatch  = "prefix-match" // latency label of the index lookup
)

// Defaults of Config.
const (
	DefaultPolicy = PolicyCacheAware
	DefaultPicker = PickerMaxScore

	// Default scorer weights. A session's own endpoint usually also holds
	// the longest prefix, so prefix and session together outweigh queue
	// and latency until the load guard steps in.
	DefaultPrefixWeight         = 3.0
	DefaultSessionWeight        = 2.0
	DefaultQueueWeight          = 2.0
	DefaultKVUtilizationWeight  = 1.0
	DefaultInFlightTokensWeight = 1.0
	DefaultPredictedTTFTWeight  = 2.0
	DefaultRoutedTokensWeight   = 4.0
	DefaultTTFTCostWeight       = 1.0

	// DefaultRoutedWindow is the number of picks over which the
	// routed-tokens scorer forgets, about one turn of every session of a
	// busy pool.
	DefaultRoutedWindow = 64

	// DefaultLoadGuardFactor and DefaultLoadGuardSlack: an endpoint is
	// overloaded when its queue exceeds 1.5 × the candidates' mean + 4.
	DefaultLoadGuardFactor = 1.5
	DefaultLoadGuardSlack  = 4

	// DefaultInteractiveLane is how many endpoints the interactive-lane
	// filter reserves for interactive turns; DefaultInteractiveLaneMinFleet
	// the fewest candidates that get a lane; DefaultInteractiveLaneHold
	// how long after the last interactive turn the lane stays reserved.
	DefaultInteractiveLane         = 1
	DefaultInteractiveLaneMinFleet = 4
	DefaultInteractiveLaneHold     = 30 * time.Second

	// DefaultMaxQueue is the has-room filter's bound on an endpoint's
	// queue (engine waiting + gateway in flight), in requests.
	DefaultMaxQueue = 64
	// DefaultMaxEngineQueue is the engine-room filter's bound on an
	// engine's own queue, in requests: flow control's default
	// queueDepthPerEndpoint, where it counts an endpoint saturated.
	DefaultMaxEngineQueue = 5
	// DefaultPrefillRate is the prefill throughput assumed of an endpoint
	// before any outcome measured it, in tokens per second.
	DefaultPrefillRate = 10_000.0
	// DefaultSmoothing is the weight of the newest sample in the
	// per-endpoint moving averages.
	DefaultSmoothing = 0.2
	// DefaultVirtualNodes is the number of points per endpoint on the
	// session-hash ring.
	DefaultVirtualNodes = 160
	// DefaultTimingSampleEvery times the plugins of one request in 8.
	DefaultTimingSampleEvery = 8
)

// DefaultFilters are the cache-aware policy's filters, in order.
var DefaultFilters = []string{FilterServesModel, FilterHealthy, FilterBreakerClosed, FilterInteractiveLane, FilterLoRAAffinity, FilterHasRoom, FilterEngineRoom}

// DefaultScorers are the cache-aware policy's scorers: the weighted
// scorers with the one cost, predicted time to first token, in place of
// predicted-ttft. The cost alone (ScorerTTFTCost as the only scorer) is
// what the cost's specification tests; measured on agent sessions it kept
// sessions on their replicas less well than the session, prefix and
// routed-tokens scorers do (docs/benchmarks.md), so they stay beside it.
var DefaultScorers = []ScorerConfig{
	{Name: ScorerPrefix, Weight: DefaultPrefixWeight},
	{Name: ScorerSession, Weight: DefaultSessionWeight},
	{Name: ScorerQueue, Weight: DefaultQueueWeight},
	{Name: ScorerKVUtilization, Weight: DefaultKVUtilizationWeight},
	{Name: ScorerTTFTCost, Weight: DefaultPredictedTTFTWeight},
	{Name: ScorerRoutedTokens, Weight: DefaultRoutedTokensWeight},
}

// WeightedScorers are the scorers of the cache-aware policy before the
// one cost, each rating one concern, summed by weight. They remain
// plugins to configure.
var WeightedScorers = []ScorerConfig{
	{Name: ScorerPrefix, Weight: DefaultPrefixWeight},
	{Name: ScorerSession, Weight: DefaultSessionWeight},
	{Name: ScorerQueue, Weight: DefaultQueueWeight},
	{Name: ScorerKVUtilization, Weight: DefaultKVUtilizationWeight},
	{Name: ScorerPredictedTTFT, Weight: DefaultPredictedTTFTWeight},
	{Name: ScorerRoutedTokens, Weight: DefaultRoutedTokensWeight},
}

var (
	policyNames = []string{PolicyCacheAware, PolicyCostAware, PolicySessionHash, PolicyLeastLoaded, PolicyRoundRobin}
	pickerNames = []string{PickerMaxScore, PickerWeightedRandom}
)

// defaultWeight is each scorer's weight when its config says zero.
var defaultWeight = map[string]float64{
	ScorerPrefix:         DefaultPrefixWeight,
	ScorerSession:        DefaultSessionWeight,
	ScorerQueue:          DefaultQueueWeight,
	ScorerKVUtilization:  DefaultKVUtilizationWeight,
	ScorerInFlightTokens: DefaultInFlightTokensWeight,
	ScorerPredictedTTFT:  DefaultPredictedTTFTWeight,
	ScorerRoutedTokens:   DefaultRoutedTokensWeight,
	ScorerTTFTCost:       DefaultTTFTCostWeight,
	ScorerPrice:          DefaultPriceWeight,
}

// Config selects and tunes the routing policy. The zero value is the
// cache-aware policy with every default. Fields a policy does not use are
// ignored (only cache-aware has plugins).
type Config struct {
	// Policy is "cache-aware" (default), "cost-aware", "session-hash",
	// "least-loaded" or "round-robin".
	Policy string `yaml:"policy" json:"policy"`
	// Filters name the filters, applied in order. Nil means DefaultFilters;
	// an empty list means none.
	Filters []string `yaml:"filters" json:"filters"`
	// Scorers name the scorers and their weights. Nil means DefaultScorers
	// (CostAwareScorers for the cost-aware policy).
	Scorers []ScorerConfig `yaml:"scorers" json:"scorers"`
	// Picker is "max-score" (default; random among ties) or
	// "weighted-random".
	Picker string `yaml:"picker" json:"picker"`
	// LoadGuard keeps a hot prefix from piling every session onto one
	// endpoint.
	LoadGuard LoadGuardConfig `yaml:"loadGuard" json:"loadGuard"`
	// TierWeights value a cached block by the tier holding it, relative to
	// HBM, by tier name ("hbm", "cpu", "disk", "shared"), each in [0, 1].
	// Missing tiers take kv.DefaultTierWeights (1, 0.8, 0.5, 0.4).
	TierWeights map[string]float64 `yaml:"tierWeights" json:"tierWeights"`
	// InteractiveLane is how many endpoints the interactive-lane filter
	// reserves for the interactive band while interactive turns arrive, in
	// fleets of at least 4 candidates. Default 1; negative disables.
	InteractiveLane int `yaml:"interactiveLane" json:"interactiveLane"`
	// InteractiveLaneHold keeps the lane reserved this long after the last
	// interactive turn. Default 30s.
	InteractiveLaneHold time.Duration `yaml:"interactiveLaneHold" json:"interactiveLaneHold"`
	// MaxQueue is the has-room filter's bound on an endpoint's queue, in
	// requests. Default 64.
	MaxQueue int `yaml:"maxQueue" json:"maxQueue"`
	// MaxEngineQueue is the engine-room filter's bound on an engine's own
	// queue (waiting requests, with those sent since the last scrape), in
	// requests. Default 5.
	MaxEngineQueue int `yaml:"maxEngineQueue" json:"maxEngineQueue"`
	// PrefillRate is the prefill throughput assumed of an endpoint until
	// outcomes measure it, in tokens per second. Default 10000.
	PrefillRate float64 `yaml:"prefillRate" json:"prefillRate"`
	// Smoothing is the weight, in (0, 1], of the newest sample in the
	// per-endpoint moving averages. Default 0.2.
	Smoothing float64 `yaml:"smoothing" json:"smoothing"`
	// VirtualNodes is the number of ring points per endpoint of the
	// session-hash policy. Default 160.
	VirtualNodes int `yaml:"virtualNodes" json:"virtualNodes"`
	// TimingSampleEvery times the plugins of one request in this many; 1
	// times every request. Default 8.
	TimingSampleEvery int `yaml:"timingSampleEvery" json:"timingSampleEvery"`
	// Cost is the price scorer's TTFT targets and prices (see CostConfig);
	// read only when the price scorer runs.
	Cost CostConfig `yaml:"cost" json:"cost"`
}

// ScorerConfig enables a scorer.
type ScorerConfig struct {
	// Name is the scorer's name, e.g. "prefix".
	Name string `yaml:"name" json:"name"`
	// Weight multiplies the scorer's [0, 1] score. Zero means the scorer's
	// default weight; to disable a scorer, leave it out.
	Weight float64 `yaml:"weight" json:"weight"`
}

// LoadGuardConfig configures the load guard.
//
// The rule: an endpoint's queue is its engine's waiting requests (when its
// load is fresh) plus the gateway's requests in flight to it. The picked
// endpoint is overloaded when its queue exceeds Factor × the mean queue of
// the candidates that passed the filters, plus Slack. An overloaded pick
// spills to the best-scoring candidate that is not overloaded; there is
// always one, since the least loaded candidate is at or below the mean.
type LoadGuardConfig struct {
	// Disabled turns the guard off. Default false.
	Disabled bool `yaml:"disabled" json:"disabled"`
	// Factor is the multiple of the mean queue allowed, at least 1.
	// Zero means 1.5.
	Factor float64 `yaml:"factor" json:"factor"`
	// Slack is the queue allowed above Factor × mean, in requests, so that
	// a nearly idle pool does not spill on one request. Zero means 4.
	Slack float64 `yaml:"slack" json:"slack"`
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Policy == "" {
		c.Policy = DefaultPolicy
	}
	if c.Filters == nil {
		c.Filters = slices.Clone(DefaultFilters)
	}
	if c.Scorers == nil && c.Policy == PolicyCostAware {
		c.Scorers = slices.Clone(CostAwareScorers)
	} else if c.Scorers == nil {
		c.Scorers = slices.Clone(DefaultScorers)
	} else {
		c.Scorers = slices.Clone(c.Scorers)
		for i := range c.Scorers {
			if c.Scorers[i].Weight == 0 {
				c.Scorers[i].Weight = defaultWeight[c.Scorers[i].Name]
			}
		}
	}
	if c.Picker == "" {
		c.Picker = DefaultPicker
	}
	if c.LoadGuard.Factor == 0 {
		c.LoadGuard.Factor = DefaultLoadGuardFactor
	}
	if c.LoadGuard.Slack == 0 {
		c.LoadGuard.Slack = DefaultLoadGuardSlack
	}
	if c.InteractiveLane == 0 {
		c.InteractiveLane = DefaultInteractiveLane
	}
	if c.InteractiveLaneHold == 0 {
		c.InteractiveLaneHold = DefaultInteractiveLaneHold
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.MaxEngineQueue == 0 {
		c.MaxEngineQueue = DefaultMaxEngineQueue
	}
	if c.PrefillRate == 0 {
		c.PrefillRate = DefaultPrefillRate
	}
	if c.Smoothing == 0 {
		c.Smoothing = DefaultSmoothing
	}
	if c.VirtualNodes == 0 {
		c.VirtualNodes = DefaultVirtualNodes
	}
	if c.TimingSampleEvery == 0 {
		c.TimingSampleEvery = DefaultTimingSampleEvery
	}
}

// Validate reports every problem of c at once, each a pools.FieldError.
// Zero fields are valid (they take defaults).
func (c *Config) Validate() error {
	var errs []error
	// The texts keep the words operators know: an unknown name says what
	// it is ("unknown policy"), an entry of a list leads with its place
	// ("filters[1]: …"), and a number with its field ("maxQueue -1 …").
	unknown := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("affinity: %w", &pools.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}))
	}
	entry := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("affinity: %w", pools.FieldErrorf(field, format, args...)))
	}
	number := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("affinity: %s %w", field, &pools.FieldError{Field: field, Message: fmt.Sprintf(format, args...)}))
	}
	if c.Policy != "" && !slices.Contains(policyNames, c.Policy) {
		unknown("policy", "unknown policy %q (want one of %v)", c.Policy, policyNames)
	}
	for i, f := range c.Filters {
		if _, ok := filterFactories[f]; !ok {
			entry(fmt.Sprintf("filters[%d]", i), "unknown filter %q", f)
		} else if slices.Index(c.Filters, f) != i {
			entry(fmt.Sprintf("filters[%d]", i), "filter %q listed twice", f)
		}
	}
	for i, s := range c.Scorers {
		if _, ok := scorerFactories[s.Name]; !ok {
			entry(fmt.Sprintf("scorers[%d]", i), "unknown scorer %q", s.Name)
		} else if slices.IndexFunc(c.Scorers, func(o ScorerConfig) bool { return o.Name == s.Name }) != i {
			entry(fmt.Sprintf("scorers[%d]", i), "scorer %q listed twice", s.Name)
		}
		if !(s.Weight >= 0) || math.IsInf(s.Weight, 0) {
			entry(fmt.Sprintf("scorers[%d]", i), "weight %v of %q is not a finite number ≥ 0", s.Weight, s.Name)
		}
	}
	if c.Picker != "" && !slices.Contains(pickerNames, c.Picker) {
		unknown("picker", "unknown picker %q (want one of %v)", c.Picker, pickerNames)
	}
	if f := c.LoadGuard.Factor; f != 0 && !(f >= 1) || math.IsInf(f, 0) {
		number("loadGuard.factor", "%v is not a finite number ≥ 1", f)
	}
	if s := c.LoadGuard.Slack; !(s >= 0) || math.IsInf(s, 0) {
		number("loadGuard.slack", "%v is not a finite number ≥ 0", s)
	}
	for name, w := range c.TierWeights {
		if _, err := kv.ParseTier(name); err != nil {
			entry("tierWeights", "unknown tier %q", name)
		}
		if !(w >= 0 && w <= 1) {
			entry(fmt.Sprintf("tierWeights[%s]", name), "%v is not in [0, 1]", w)
		}
	}
	if c.InteractiveLaneHold < 0 {
		number("interactiveLaneHold", "%v is negative", c.InteractiveLaneHold)
	}
	if c.MaxQueue < 0 {
		number("maxQueue", "%d is negative", c.MaxQueue)
	}
	if c.MaxEngineQueue < 0 {
		number("maxEngineQueue", "%d is negative", c.MaxEngineQueue)
	}
	if !(c.PrefillRate >= 0) || math.IsInf(c.PrefillRate, 0) {
		number("prefillRate", "%v is not a finite number ≥ 0", c.PrefillRate)
	}
	if !(c.Smoothing >= 0 && c.Smoothing <= 1) {
		number("smoothing", "%v is not in [0, 1]", c.Smoothing)
	}
	if c.VirtualNodes < 0 || c.VirtualNodes > 10_000 {
		number("virtualNodes", "%d is not in [0, 10000]", c.VirtualNodes)
	}
	if c.TimingSampleEvery < 0 {
		number("timingSampleEvery", "%d is negative", c.TimingSampleEvery)
	}
	errs = append(errs, c.Cost.validate())
	return errors.Join(errs...)
}

// tierWeights resolves TierWeights over kv.DefaultTierWeights.
func (c *Config) tierWeights() kv.TierWeights {
	w := kv.DefaultTierWeights
	for name, v := range c.TierWeights {
		if t, err := kv.ParseTier(name); err == nil {
			w[t] = v
		}
	}
	return w
}
