package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// metrics are the gateway's own collectors.
type metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	ttft     *prometheus.HistogramVec
	duration *prometheus.HistogramVec
}

// latencyBuckets span 5ms to 2 minutes: TTFT of a cached short prompt up to
// the end of a long generation.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

func newMetrics(reg *prometheus.Registry, fleet *pools.Registry, memo *prompt.Memo) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_requests_total",
			Help: "Requests answered, by route and HTTP status code.",
		}, []string{"route", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_request_errors_total",
			Help: "Error answers, by error class (the OpenAI error code).",
		}, []string{"class"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_time_to_first_token_seconds",
			Help:    "Time from a streamed request's arrival to the engine's first event, by route.",
			Buckets: latencyBuckets,
		}, []string{"route"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_request_duration_seconds",
			Help:    "End-to-end request latency, by route.",
			Buckets: latencyBuckets,
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.errors, m.ttft, m.duration, &endpointCollector{fleet: fleet}, connCollector{fleet})
	if memo != nil {
		reg.MustRegister(memoCollector{memo})
	}
	return m
}

var (
	memoBytesDesc   = prometheus.NewDesc("turnpike_prompt_memo_bytes", "Memory held by the prompt memo: decoded messages and block hashes of recent chat bodies.", nil, nil)
	memoEntriesDesc = prometheus.NewDesc("turnpike_prompt_memo_entries", "Chat bodies the prompt memo holds.", nil, nil)
	memoLookupsDesc = prometheus.NewDesc("turnpike_prompt_memo_lookups_total", "Chat bodies looked up in the prompt memo, by result: hit (an earlier turn shared its opening) or miss.", []string{"result"}, nil)
)

// memoCollector reads the prompt memo's counters at scrape time.
type memoCollector struct{ memo *prompt.Memo }

func (c memoCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- memoBytesDesc
	ch <- memoEntriesDesc
	ch <- memoLookupsDesc
}

func (c memoCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.memo.Stats()
	ch <- prometheus.MustNewConstMetric(memoBytesDesc, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(memoEntriesDesc, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(memoLookupsDesc, prometheus.CounterValue, float64(st.Hits), "hit")
	ch <- prometheus.MustNewConstMetric(memoLookupsDesc, prometheus.CounterValue, float64(st.Misses), "miss")
}

var engineConnsDesc = prometheus.NewDesc("turnpike_engine_connections_total",
	"Engine requests by the connection they went out on: new (a connection opened), reused (a kept-alive one) or resent (again on a new one, the kept-alive one having been closed by its engine).", []string{"kind"}, nil)

// connCollector reads the engine client's connection counts at scrape time.
type connCollector struct{ fleet *pools.Registry }

func (c connCollector) Describe(ch chan<- *prometheus.Desc) { ch <- engineConnsDesc }

func (c connCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.fleet.Client().ConnStats()
	ch <- prometheus.MustNewConstMetric(engineConnsDesc, prometheus.CounterValue, float64(st.New), "new")
	ch <- prometheus.MustNewConstMetric(engineConnsDesc, prometheus.CounterValue, float64(st.Reused), "reused")
	ch <- prometheus.MustNewConstMetric(engineConnsDesc, prometheus.CounterValue, float64(st.Resent), "resent")
}

func (m *metrics) observeRequest(route string, status int, start time.Time, ttft time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	if ttft > 0 {
		m.ttft.WithLabelValues(route).Observe(ttft.Seconds())
	}
}

// endpointCollector reads each endpoint's live state at scrape time, so the
// request path pays nothing for these gauges.
type endpointCollector struct {
	fleet *pools.Registry
}

var (
	descInFlight = prometheus.NewDesc("turnpike_endpoint_in_flight_requests",
		"Requests this gateway has in flight on the endpoint.", []string{"pool", "endpoint"}, nil)
	descPeerInFlight = prometheus.NewDesc("turnpike_endpoint_peer_in_flight_requests",
		"Requests the other gateways on the fleet last reported in flight on the endpoint (routing.shareLoad).", []string{"pool", "endpoint"}, nil)
	descBreaker = prometheus.NewDesc("turnpike_endpoint_breaker_state",
		"Circuit breaker state of the endpoint: 0 closed, 1 half-open, 2 open.", []string{"pool", "endpoint"}, nil)
	descHealthy = prometheus.NewDesc("turnpike_endpoint_healthy",
		"1 if the endpoint's last health check passed.", []string{"pool", "endpoint"}, nil)
	descQueue = prometheus.NewDesc("turnpike_endpoint_queue_depth",
		"Requests waiting in the engine's queue, as last scraped.", []string{"pool", "endpoint"}, nil)
	descKV = prometheus.NewDesc("turnpike_endpoint_kv_cache_usage",
		"Fraction of the engine's KV cache in use, as last scraped.", []string{"pool", "endpoint"}, nil)
)

func (c *endpointCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInFlight, descPeerInFlight, descBreaker, descHealthy, descQueue, descKV} {
		ch <- d
	}
}

func (c *endpointCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ep := range c.fleet.Endpoints() {
		pool := ep.Pool.Name()
		l := ep.Load()
		healthy := 0.0
		if ep.Healthy() {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(ep.OwnInFlight()), pool, ep.ID)
		ch <- prometheus.MustNewConstMetric(descPeerInFlight, prometheus.GaugeValue, float64(ep.Peers().InFlight), pool, ep.ID)
		ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, breakerValue(ep.BreakerState()), pool, ep.ID)
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, pool, ep.ID)
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(l.Waiting), pool, ep.ID)
		ch <- prometheus.MustNewConstMetric(descKV, prometheus.GaugeValue, l.KVUsage, pool, ep.ID)
	}
}

func breakerValue(s gobreaker.State) float64 {
	switch s {
	case gobreaker.StateHalfOpen:
		return 1
	case gobreaker.StateOpen:
		return 2
	}
	return 0
}
