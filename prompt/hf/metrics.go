package hf

import "github.com/prometheus/client_golang/prometheus"

// Collector reports c's state at scrape time, with labels (a pool's name,
// say) on every series:
//
//	turnpike_token_cache_bytes               memory the cache holds
//	turnpike_token_cache_sessions            keys it holds
//	turnpike_token_cache_turns_total{result} calls that reused ids ("reused")
//	                                         or encoded the whole prompt ("encoded")
func (c *Incremental) Collector(labels prometheus.Labels) prometheus.Collector {
	return &incrementalCollector{
		c:        c,
		bytes:    prometheus.NewDesc("turnpike_token_cache_bytes", "Memory the incremental token cache holds: token ids, keys and bookkeeping.", nil, labels),
		sessions: prometheus.NewDesc("turnpike_token_cache_sessions", "Sessions whose token ids the incremental token cache holds.", nil, labels),
		turns:    prometheus.NewDesc("turnpike_token_cache_turns_total", "Prompts encoded through the incremental token cache, by whether they reused a session's ids.", []string{"result"}, labels),
	}
}

type incrementalCollector struct {
	c                      *Incremental
	bytes, sessions, turns *prometheus.Desc
}

func (k *incrementalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- k.bytes
	ch <- k.sessions
	ch <- k.turns
}

func (k *incrementalCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(k.bytes, prometheus.GaugeValue, float64(k.c.Bytes()))
	ch <- prometheus.MustNewConstMetric(k.sessions, prometheus.GaugeValue, float64(k.c.Len()))
	ch <- prometheus.MustNewConstMetric(k.turns, prometheus.CounterValue, float64(k.c.Hits()), "reused")
	ch <- prometheus.MustNewConstMetric(k.turns, prometheus.CounterValue, float64(k.c.Misses()), "encoded")
}
