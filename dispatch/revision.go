package dispatch

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
)

// keepRevision keeps of eps, in place, the endpoints of the revision the
// turn's session goes to while several revisions serve its model: the
// revision of the endpoint it is pinned to while that serves, else the
// one the model's affinity.RevisionPolicy assigns it (weights, a
// preferred revision, or the newest).
func (t *Turn) keepRevision(eps []*pools.Endpoint) []*pools.Endpoint {
	d := t.d
	if !affinity.MixedRevisions(eps) {
		return eps
	}
	var pinned *pools.Endpoint
	if t.sessionKey != "" && d.sessions != nil {
		if id, _ := d.sessions.Pinned(t.spec.Tenant, t.sessionKey, time.Now()); id != "" {
			pinned, _ = d.reg.Endpoint(id)
		}
	}
	return d.revisions.Keep(t.spec.Model, t.sessionKey, pinned, eps)
}

// Revisions is the table of the models' revision policies the dispatcher
// assigns new sessions by; the admin API changes it at runtime.
func (d *Dispatcher) Revisions() *affinity.Revisions { return d.revisions }

// revisionMetrics are the turns, their time to first token and their
// cached share, the hand-offs and warm-ups, by the revision of the
// endpoint that served them: a rollout's or a canary's comparison.
type revisionMetrics struct {
	turns        *prometheus.CounterVec
	ttft         *prometheus.HistogramVec
	promptTokens *prometheus.CounterVec
	cachedTokens *prometheus.CounterVec
	handOffs     *prometheus.CounterVec
	warmUps      *prometheus.CounterVec
	crossed      prometheus.Counter
	// nextTurn is the TTFT of a handed-over session's next turn, by
	// whether its endpoint was warmed.
	nextTurn *prometheus.HistogramVec
	// pending, once set (initHandOff), counts the sessions whose turns
	// still go to a draining endpoint while their new one is warmed.
	pending prometheus.GaugeFunc
}

// ttftBuckets resolve a TTFT's median to within a tenth or so, from 10 ms
// to 30 s.
var ttftBuckets = prometheus.ExponentialBucketsRange(0.01, 30, 40)

// Warm-up results, the label of turnpike_warmups_total.
const (
	// WarmUpSent: the engine prefilled the session's last prompt.
	WarmUpSent = "sent"
	// WarmUpFailed: the engine refused it or failed.
	WarmUpFailed = "failed"
	// WarmUpBudget: the warm-up budget (tokens a second) was spent, and
	// would not refill before the session had to move (HandOffConfig.MaxWait).
	WarmUpBudget = "budget"
	// WarmUpBusy: the endpoint had no slack (queued work, or no room).
	WarmUpBusy = "busy"
	// WarmUpCached: the endpoint already held the prompt.
	WarmUpCached = "cached"
)

func newRevisionMetrics() *revisionMetrics {
	return &revisionMetrics{
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_revision_turns_total",
			Help: "Turns answered, by the revision of the endpoint that served them (the decoder's for P/D).",
		}, []string{"revision"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_revision_ttft_seconds",
			Help:    "Time to first token of streamed turns, from the turn's start, by the revision of the endpoint that served them.",
			Buckets: ttftBuckets,
		}, []string{"revision"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_revision_prompt_tokens_total",
			Help: "Prompt tokens of answered turns, as engines counted them, by the revision of the endpoint that served them.",
		}, []string{"revision"}),
		cachedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_revision_cached_tokens_total",
			Help: "Prompt tokens engines found cached, by revision: over turnpike_revision_prompt_tokens_total, the cached share.",
		}, []string{"revision"}),
		handOffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_session_handoffs_total",
			Help: "Sessions re-pinned, before their next turn, from an endpoint that started to drain to the one that will serve that turn best, by that endpoint's revision.",
		}, []string{"revision"}),
		warmUps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_warmups_total",
			Help: "Warm-ups of handed-over sessions (their last prompt prefilled on their new endpoint), by its revision and result: sent, failed, budget (the tokens-a-second budget was spent), busy (no slack there), cached (held already).",
		}, []string{"revision", "result"}),
		nextTurn: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "turnpike_handoff_next_turn_ttft_seconds",
			Help:    "Time to first token of the first streamed turn of a session after its hand-over, by whether its new endpoint was warmed (warmed true) or not.",
			Buckets: ttftBuckets,
		}, []string{"warmed"}),
		crossed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_pd_cross_revision_legs_total",
			Help: "Prefill legs run on a prefiller of another revision than their decoder's (only pairs routing.pd.compatibleRevisions allows).",
		}),
	}
}

func (m *revisionMetrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.turns, m.ttft, m.promptTokens, m.cachedTokens, m.handOffs, m.warmUps, m.crossed, m.nextTurn}
	if m.pending != nil {
		cs = append(cs, m.pending)
	}
	return cs
}

// turnEnded counts an answered turn of ep's revision.
func (m *revisionMetrics) turnEnded(ep *pools.Endpoint, o *affinity.Outcome) {
	rev := ep.Revision()
	m.turns.WithLabelValues(rev).Inc()
	if o.TTFT > 0 {
		m.ttft.WithLabelValues(rev).Observe(o.TTFT.Seconds())
	}
	if o.PromptTokens > 0 {
		m.promptTokens.WithLabelValues(rev).Add(float64(o.PromptTokens))
		m.cachedTokens.WithLabelValues(rev).Add(float64(o.CachedTokens))
	}
}

// prefillLeg counts a prefill leg on prefiller for decoder that crossed
// revisions.
func (m *revisionMetrics) prefillLeg(prefiller, decoder *pools.Endpoint) {
	if decoder != nil && prefiller.Revision() != decoder.Revision() {
		m.crossed.Inc()
	}
}
