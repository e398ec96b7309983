package sim

import (
	"time"

	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
)

// Histogram buckets, vLLM's.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// metricNames maps the engine's series to one flavour's names. An empty
// name is a series the flavour does not export.
type metricNames struct {
	running, waiting, usage, cacheInfo string
	prefixQueries, prefixHits, hitRate string
	promptTokens, generationTokens     string
	ttft, itl, e2e                     string
}

var flavorMetrics = map[string]metricNames{
	FlavorVLLM: {
		running:          enginemetrics.VLLMNumRequestsRunning,
		waiting:          enginemetrics.VLLMNumRequestsWaiting,
		usage:            enginemetrics.VLLMKVCacheUsagePerc,
		cacheInfo:        enginemetrics.VLLMCacheConfigInfo,
		prefixQueries:    enginemetrics.VLLMPrefixCacheQueries,
		prefixHits:       enginemetrics.VLLMPrefixCacheHits,
		promptTokens:     enginemetrics.VLLMPromptTokens,
		generationTokens: enginemetrics.VLLMGenerationTokens,
		ttft:             enginemetrics.VLLMTimeToFirstToken,
		itl:              enginemetrics.VLLMInterTokenLatency,
		e2e:              enginemetrics.VLLME2ERequestLatency,
	},
	FlavorVLLMTPU: {
		running:          enginemetrics.VLLMNumRequestsRunning,
		waiting:          enginemetrics.VLLMNumRequestsWaiting,
		usage:            enginemetrics.VLLMGPUCacheUsagePerc,
		cacheInfo:        enginemetrics.VLLMCacheConfigInfo,
		prefixQueries:    enginemetrics.VLLMGPUPrefixCacheQueries,
		prefixHits:       enginemetrics.VLLMGPUPrefixCacheHits,
		promptTokens:     enginemetrics.VLLMPromptTokens,
		generationTokens: enginemetrics.VLLMGenerationTokens,
		ttft:             enginemetrics.VLLMTimeToFirstToken,
		itl:              enginemetrics.VLLMInterTokenLatency,
		e2e:              enginemetrics.VLLME2ERequestLatency,
	},
	FlavorSGLang: {
		running:          enginemetrics.SGLangNumRunningReqs,
		waiting:          enginemetrics.SGLangNumQueueReqs,
		usage:            enginemetrics.SGLangTokenUsage,
		cacheInfo:        enginemetrics.SGLangCacheConfigInfo,
		hitRate:          enginemetrics.SGLangCacheHitRate,
		promptTokens:     enginemetrics.SGLangPromptTokens,
		generationTokens: enginemetrics.SGLangGenerationTokens,
		ttft:             enginemetrics.SGLangTimeToFirstToken,
		itl:              enginemetrics.SGLangInterTokenLatency,
		e2e:              enginemetrics.SGLangE2ERequestLatency,
	},
}

// metrics is an engine's Prometheus series, in a registry of its own so
// that many engines live in one process. Every latency is in simulated
// seconds: what the modelled hardware would take, not the scaled wall
// time. The engine loop writes them; scrapes read them concurrently (the
// client library's types are safe for that).
type metrics struct {
	reg *prometheus.Registry

	running, waiting, usage prometheus.Gauge
	hitRate                 prometheus.Gauge // nil unless sglang
	prefixQueries           prometheus.Counter
	prefixHits              prometheus.Counter
	promptTokens            prometheus.Counter
	generationTokens        prometheus.Counter
	ttft, itl, e2e          prometheus.Observer
	// xferTime and xferBytes are remote KV pulls (vLLM's NIXL series).
	xferTime, xferBytes prometheus.Observer
	// Prefix hits below HBM: tokens loaded (vLLM's connector series) and,
	// per medium, tokens and load time.
	externalHits  prometheus.Counter
	tierHitTokens *prometheus.CounterVec
	tierLoadTime  *prometheus.HistogramVec

	// Totals behind the sglang hit rate, owned by the engine loop.
	queried, hit float64
}

func newMetrics(flavor, model string, blockSize, numBlocks, maxNumSeqs, maxBatchedTokens int) *metrics {
	n := flavorMetrics[flavor]
	m := &metrics{reg: prometheus.NewRegistry()}
	labels := prometheus.Labels{enginemetrics.LabelModelName: model}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		m.reg.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		if name == "" {
			// A series the flavour does not export still counts, unregistered.
			return prometheus.NewCounter(prometheus.CounterOpts{Name: "unexported"})
		}
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		m.reg.MustRegister(c)
		return c
	}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		m.reg.MustRegister(h)
		return h
	}
	m.running = gauge(n.running, "Number of requests in model execution batches.")
	m.waiting = gauge(n.waiting, "Number of requests waiting to be processed.")
	m.usage = gauge(n.usage, "KV cache usage, 1 means 100 percent.")
	if n.hitRate != "" {
		m.hitRate = gauge(n.hitRate, "Prefix cache hit rate, cached over prompt tokens.")
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: n.cacheInfo,
		Help: "Information of the KV cache configuration.",
		ConstLabels: prometheus.Labels{
			enginemetrics.LabelBlockSize:    strconv.Itoa(blockSize),
			enginemetrics.LabelNumGPUBlocks: strconv.Itoa(numBlocks),
			// The scheduler's limits, so that a gateway can calibrate how
			// much the engine takes at once.
			enginemetrics.LabelMaxNumSeqs:          strconv.Itoa(maxNumSeqs),
			enginemetrics.LabelMaxNumBatchedTokens: strconv.Itoa(maxBatchedTokens),
		},
	})
	info.Set(1)
	m.reg.MustRegister(info)
	m.prefixQueries = counter(n.prefixQueries, "Prefix cache queries, in tokens.")
	m.prefixHits = counter(n.prefixHits, "Prefix cache hits, in tokens.")
	m.promptTokens = counter(n.promptTokens, "Number of prefill tokens processed.")
	m.generationTokens = counter(n.generationTokens, "Number of generation tokens processed.")
	m.ttft = hist(n.ttft, "Histogram of time to first token in seconds.", ttftBuckets)
	m.itl = hist(n.itl, "Histogram of inter-token latency in seconds.", itlBuckets)
	m.e2e = hist(n.e2e, "Histogram of end to end request latency in seconds.", e2eBuckets)
	m.xferTime = hist(enginemetrics.VLLMNIXLXferTime, "Histogram of transfer duration for KV cache pulls from a prefill engine, in seconds.", ttftBuckets)
	m.xferBytes = hist(enginemetrics.VLLMNIXLBytesTransferred, "Histogram of bytes transferred per KV cache pull.", prometheus.ExponentialBuckets(1<<20, 4, 10))
	m.externalHits = counter(enginemetrics.VLLMExternalPrefixCacheHits, "External prefix cache hits from KV connector cross-instance cache sharing, in tokens.")
	m.tierHitTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sim_kv_tier_hit_tokens_total", Help: "Prompt tokens found in a KV tier below HBM and loaded instead of recomputed, by medium.", ConstLabels: labels,
	}, []string{"medium"})
	m.tierLoadTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sim_kv_tier_load_seconds", Help: "Simulated time to load a request's prefix hit from the KV tiers below HBM, by slowest medium.", Buckets: ttftBuckets, ConstLabels: labels,
	}, []string{"medium"})
	m.reg.MustRegister(m.tierHitTokens, m.tierLoadTime)
	return m
}

// tierLoad counts one request's prefix hit below HBM.
func (m *metrics) tierLoad(loads []tierLoad, slowest string, d time.Duration) {
	var total int
	for _, l := range loads {
		m.tierHitTokens.WithLabelValues(l.medium).Add(float64(l.tokens))
		total += l.tokens
	}
	m.externalHits.Add(float64(total))
	m.tierLoadTime.WithLabelValues(slowest).Observe(d.Seconds())
}

// kvTransfer counts one remote KV pull.
func (m *metrics) kvTransfer(d time.Duration, bytes float64) {
	m.xferTime.Observe(d.Seconds())
	m.xferBytes.Observe(bytes)
}

// admitted counts a request's prompt against the prefix cache.
func (m *metrics) admitted(promptTokens, cachedTokens int) {
	m.prefixQueries.Add(float64(promptTokens))
	m.prefixHits.Add(float64(cachedTokens))
	m.promptTokens.Add(float64(promptTokens))
	m.queried += float64(promptTokens)
	m.hit += float64(cachedTokens)
	if m.hitRate != nil && m.queried > 0 {
		m.hitRate.Set(m.hit / m.queried)
	}
}
