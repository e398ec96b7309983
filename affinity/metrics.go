package affinity

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/kv"
)

// Reasons of a routing decision, the reason label of
// turnpike_affinity_decisions_total.
const (
	// ReasonSessionPin: the session's pinned endpoint.
	ReasonSessionPin = "session-pin"
	// ReasonPrefixHit: an endpoint holding part of the prompt.
	ReasonPrefixHit = "prefix-hit"
	// ReasonLoadGuardSpill: the load guard moved the pick off an
	// overloaded endpoint.
	ReasonLoadGuardSpill = "load-guard-spill"
	// ReasonPrefixSpill: another candidate held more of the prompt, but
	// the pick's cost (predicted time to first token, queue included) was
	// lower.
	ReasonPrefixSpill = "prefix-spill"
	// ReasonNoCache: no endpoint held any of the prompt (or it was not
	// hashed); load decided.
	ReasonNoCache = "no-cache"
	// ReasonSessionHash: the session-hash ring, by session key.
	ReasonSessionHash = "session-hash"
	// ReasonRoundRobin: a sessionless request of session-hash.
	ReasonRoundRobin = "round-robin"
)

// decisionReason indexes the reasons above in pre-resolved counters.
type decisionReason uint8

const (
	reasonSessionPin decisionReason = iota
	reasonPrefixHit
	reasonLoadGuardSpill
	reasonPrefixSpill
	reasonNoCache
	reasonSessionHash
	reasonRoundRobin
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonSessionPin, ReasonPrefixHit, ReasonLoadGuardSpill, ReasonPrefixSpill, ReasonNoCache,
	ReasonSessionHash, ReasonRoundRobin,
}

// metrics are the affinity collectors, shared by the policies of one
// registry. Counters are resolved per label once, so the hot path only
// increments.
type metrics struct {
	decisions *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	predicted prometheus.Histogram
	actual    prometheus.Histogram
	cache     *cacheMetrics
}

// cachedTokenBuckets span one block to a 256k-token context.
var cachedTokenBuckets = append([]float64{0}, prometheus.ExponentialBuckets(16, 4, 8)...)

func newMetrics(r prometheus.Registerer, index *kv.Index) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_affinity_decisions_total",
			Help: "Routing decisions, by policy and reason.",
		}, []string{"policy", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_affinity_plugin_duration_seconds",
			Help:    "Time each routing plugin took on one request (sampled).",
			Buckets: prometheus.ExponentialBuckets(250e-9, 4, 10), // 250ns to 65ms
		}, []string{"plugin"}),
		predicted: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "turnpike_affinity_predicted_cached_tokens",
			Help:    "Prompt tokens the prefix index predicted cached on the picked endpoint, per request with engine usage.",
			Buckets: cachedTokenBuckets,
		}),
		actual: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "turnpike_affinity_actual_cached_tokens",
			Help:    "Prompt tokens the engine reported cached, per request the prediction was made for.",
			Buckets: cachedTokenBuckets,
		}),
	}
	var err error
	if m.cache, err = newCacheMetrics(r); err != nil || r == nil {
		return m, err
	}
	if m.decisions, err = register(r, m.decisions); err != nil {
		return nil, err
	}
	if m.latency, err = register(r, m.latency); err != nil {
		return nil, err
	}
	if m.predicted, err = register(r, m.predicted); err != nil {
		return nil, err
	}
	if m.actual, err = register(r, m.actual); err != nil {
		return nil, err
	}
	if index != nil {
		if _, err = register(r, prometheus.Collector(&indexCollector{index: index})); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// register registers c, or returns the collector already registered in its
// place, so that several policies (a benchmark's side-by-side runs) can share
// a registry.
func register[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	err := r.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("affinity: registering metrics: %w", err)
}

// discardMetrics are metrics registered nowhere, for a policy built
// without a registry.
func discardMetrics() *metrics {
	m, _ := newMetrics(nil, nil)
	return m
}

// reasonCounters resolves the decision counters of policy.
func (m *metrics) reasonCounters(policy string) (out [numReasons]prometheus.Counter) {
	for i, name := range reasonNames {
		out[i] = m.decisions.WithLabelValues(policy, name)
	}
	return out
}

// indexCollector reports the prefix index's size and hit counters at
// scrape time.
type indexCollector struct {
	index *kv.Index
}

var (
	indexBlocksDesc = prometheus.NewDesc("turnpike_prefix_index_blocks",
		"Distinct KV-cache blocks the prefix index holds, over all endpoints.", nil, nil)
	indexLookupsDesc = prometheus.NewDesc("turnpike_prefix_index_lookups_total",
		"Prefix lookups made.", nil, nil)
	indexLookupBlocksDesc = prometheus.NewDesc("turnpike_prefix_index_lookup_blocks_total",
		"Prompt blocks looked up.", nil, nil)
	indexMatchedBlocksDesc = prometheus.NewDesc("turnpike_prefix_index_matched_blocks_total",
		"Prompt blocks of the longest match found, summed over lookups.", nil, nil)
	indexHitRatioDesc = prometheus.NewDesc("turnpike_prefix_index_hit_ratio",
		"Matched over looked-up blocks since start; rate() the totals for a recent ratio.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- indexBlocksDesc
	ch <- indexLookupsDesc
	ch <- indexLookupBlocksDesc
	ch <- indexMatchedBlocksDesc
	ch <- indexHitRatioDesc
}

// Collect implements prometheus.Collector.
func (c *indexCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.index.Stats()
	ch <- prometheus.MustNewConstMetric(indexBlocksDesc, prometheus.GaugeValue, float64(s.Blocks))
	ch <- prometheus.MustNewConstMetric(indexLookupsDesc, prometheus.CounterValue, float64(s.Lookups))
	ch <- prometheus.MustNewConstMetric(indexLookupBlocksDesc, prometheus.CounterValue, float64(s.LookupBlocks))
	ch <- prometheus.MustNewConstMetric(indexMatchedBlocksDesc, prometheus.CounterValue, float64(s.MatchedBlocks))
	var ratio float64
	if s.LookupBlocks > 0 {
		ratio = float64(s.MatchedBlocks) / float64(s.LookupBlocks)
	}
	ch <- prometheus.MustNewConstMetric(indexHitRatioDesc, prometheus.GaugeValue, ratio)
}
