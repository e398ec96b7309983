package turns

import "github.com/prometheus/client_golang/prometheus"

// metrics are the Controller's Prometheus collectors. Children used on every
// turn are resolved once (per band here, per tenant in tenantState) so the
// hot path does not hash label values.
type metrics struct {
	queued    *prometheus.GaugeVec
	wait      *prometheus.HistogramVec
	admitted  *prometheus.CounterVec
	shed      *prometheus.CounterVec
	cancelled *prometheus.CounterVec
	// sentBefore counts the turns sent past the pool's room as their
	// band's TTL neared (Controller.expireLocked).
	sentBefore *prometheus.CounterVec
	saturation *prometheus.GaugeVec
	// lowerSaturation is the pool's saturation for Standard and
	// Background turns, less the room kept for Interactive ones.
	lowerSaturation *prometheus.GaugeVec
	inFlight        *prometheus.GaugeVec
	tokens          *prometheus.CounterVec

	admittedBy  [numBands]prometheus.Counter
	cancelledBy [numBands]prometheus.Counter
	// sentBeforeTTL are sentBefore's children, by band.
	sentBeforeTTL [numBands]prometheus.Counter
	shedBy        [numBands][len(reasons)]prometheus.Counter
}

// waitBuckets span a fast dispatch to a background band's TTL, in seconds.
var waitBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turnpike_turns_queued",
			Help: "Turns waiting in flow-control queues, by band and tenant.",
		}, []string{"band", "tenant"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_turns_wait_seconds",
			Help:    "Time from Acquire to dispatch of dispatched turns, by band and tenant.",
			Buckets: waitBuckets,
		}, []string{"band", "tenant"}),
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_turns_admitted_total",
			Help: "Turns dispatched (granted a ticket), by band.",
		}, []string{"band"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_turns_shed_total",
			Help: "Turns shed, at admission or from a queue, by band and reason.",
		}, []string{"band", "reason"}),
		cancelled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_turns_cancelled_total",
			Help: "Turns whose context ended while they were queued, by band.",
		}, []string{"band"}),
		sentBefore: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_turns_sent_before_ttl_total",
			Help: "Turns sent to an engine past the pool's room as their band's TTL neared, by band (also counted as admitted).",
		}, []string{"band"}),
		saturation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turnpike_turns_pool_saturation",
			Help: "Last measured pool saturation, 0..1.",
		}, []string{"pool"}),
		lowerSaturation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turnpike_turns_pool_lower_band_saturation",
			Help: "Last measured pool saturation for the standard and background bands, less the room kept for interactive turns, 0..1.",
		}, []string{"pool"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turnpike_turns_dispatched",
			Help: "Turns dispatched and not yet released, by pool.",
		}, []string{"pool"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_turns_tenant_tokens_total",
			Help: "Tokens of released turns (actual when reported, else estimated), by tenant.",
		}, []string{"tenant"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.queued, m.wait, m.admitted, m.shed, m.cancelled, m.sentBefore, m.saturation, m.lowerSaturation, m.inFlight, m.tokens} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	for i, b := range Bands {
		m.admittedBy[i] = m.admitted.WithLabelValues(b.String())
		m.cancelledBy[i] = m.cancelled.WithLabelValues(b.String())
		m.sentBeforeTTL[i] = m.sentBefore.WithLabelValues(b.String())
		for j, r := range reasons {
			m.shedBy[i][j] = m.shed.WithLabelValues(b.String(), r)
		}
	}
	return m, nil
}

func (m *metrics) shedOne(b Band, reason string) {
	for j, r := range reasons {
		if r == reason {
			m.shedBy[b.index()][j].Inc()
			return
		}
	}
	panic("turns: unknown shed reason " + reason)
}
