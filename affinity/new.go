package affinity

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// Deps are what a policy is built over. Every field is optional; each nil
// says what the policy does without it.
type Deps struct {
	// Index is the KV-cache prefix index. Nil: no prefix scoring, and the
	// gateway need not hash prompts.
	Index *kv.Index
	// Hasher hashes prompts; the policy takes its block size from it. Nil
	// means kv.DefaultBlockSize.
	Hasher *kv.Hasher
	// Sessions keeps session pins. Nil: no session pins.
	Sessions *sessions.Store
	// Metrics is where the policy registers its collectors; nil registers
	// none. Collectors already registered by another policy are shared.
	Metrics prometheus.Registerer
	// Rand returns uniformly random bits and must be safe for concurrent
	// use. Nil means math/rand/v2's Uint64.
	Rand func() uint64
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// env is what plugin factories build from.
type env struct {
	cfg         *Config
	tierWeights kv.TierWeights
	stats       *EndpointStats
	routed      *RoutedLoad
	model       *TTFTModel
	price       *PriceModel // built by the price scorer's factory
	metrics     prometheus.Registerer
	rand        func() uint64
	now         func() time.Time
}

// priceModel is e's price model, built on first use with its metrics.
func (e *env) priceModel() *PriceModel {
	if e.price == nil {
		e.price = NewPriceModel(e.cfg.Cost, e.cfg.Smoothing, e.model)
		if e.metrics != nil {
			// Registration fails only on a name taken by another kind of
			// collector; the prices then go unreported, routing is the same.
			if pm, err := newPriceMetrics(e.metrics); err == nil {
				e.price.metrics = pm
			}
		}
	}
	return e.price
}

// NewPolicy builds the policy cfg names over deps. cfg's zero fields take
// their defaults; an invalid cfg is an error that lists every problem.
func NewPolicy(cfg Config, deps Deps) (Policy, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Rand == nil {
		deps.Rand = rand.Uint64
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	m := discardMetrics()
	if deps.Metrics != nil {
		var err error
		if m, err = newMetrics(deps.Metrics, deps.Index); err != nil {
			return nil, err
		}
	}
	switch cfg.Policy {
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	case PolicyLeastLoaded:
		return &LeastLoaded{}, nil
	case PolicySessionHash:
		s := NewSessionHash(cfg.VirtualNodes)
		s.decisions = m.reasonCounters(PolicySessionHash)
		return s, nil
	case PolicyCacheAware, PolicyCostAware:
		return newCacheAware(&cfg, deps, m), nil
	}
	panic(fmt.Sprintf("affinity: policy %q passed Validate", cfg.Policy))
}

func newCacheAware(cfg *Config, deps Deps, m *metrics) *CacheAware {
	stats := NewEndpointStats(cfg.PrefillRate, cfg.Smoothing)
	routed := NewRoutedLoad(DefaultRoutedWindow)
	e := &env{
		cfg:         cfg,
		tierWeights: cfg.tierWeights(),
		stats:       stats,
		routed:      routed,
		model:       NewTTFTModel(cfg.PrefillRate, cfg.Smoothing, stats, routed),
		metrics:     deps.Metrics,
		rand:        deps.Rand,
		now:         deps.Now,
	}
	var filters []Filter
	for _, name := range cfg.Filters {
		filters = append(filters, filterFactories[name](e))
	}
	var scorers []WeightedScorer
	for _, sc := range cfg.Scorers {
		scorers = append(scorers, WeightedScorer{Scorer: scorerFactories[sc.Name](e), Weight: sc.Weight})
	}
	opts := PipelineOptions{SampleEvery: cfg.TimingSampleEvery}
	if deps.Metrics != nil {
		opts.Latency = m.latency
	}
	if !cfg.LoadGuard.Disabled {
		opts.Guard = &LoadGuard{Factor: cfg.LoadGuard.Factor, Slack: cfg.LoadGuard.Slack}
	}
	p := &CacheAware{
		name:      cfg.Policy,
		pipe:      NewPipeline(filters, scorers, pickerFactories[cfg.Picker](e), opts),
		index:     deps.Index,
		sessions:  deps.Sessions,
		blockSize: deps.Hasher.BlockTokens(),
		stats:     e.stats,
		routed:    e.routed,
		model:     e.model,
		price:     e.price,
		weights:   e.tierWeights,
		now:       deps.Now,
		decisions: m.reasonCounters(cfg.Policy),
		predicted: m.predicted,
		actual:    m.actual,
		cache:     m.cache,
	}
	if opts.Latency != nil {
		p.matchObs = m.latency.WithLabelValues(producerPrefixMatch)
	}
	return p
}
