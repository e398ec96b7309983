package affinity

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// Band names of CostConfig.TTFTTargets and Request.Band: flow control's
// bands.
const (
	BandInteractive = "interactive"
	BandStandard    = "standard"
	BandBackground  = "background"
)

// Defaults of CostConfig.
const (
	// DefaultPriceWeight is the price scorer's weight in the cost-aware
	// policy: above the other scorers' of that policy together, so that
	// within the TTFT target a pool markedly cheaper wins over a
	// shorter queue.
	DefaultPriceWeight = 8.0
	// DefaultExpectedOutputTokens is the output a request that sets no
	// max_tokens is priced for.
	DefaultExpectedOutputTokens = 256
	// DefaultPriorBatch and DefaultPriorContext are the decode batch and
	// context per sequence at which the roofline prior of an endpoint's
	// decode throughput is taken, before any answer measured it.
	DefaultPriorBatch   = 32
	DefaultPriorContext = 4096
)

// DefaultTTFTTargets are the time-to-first-token targets of the bands.
var DefaultTTFTTargets = map[string]time.Duration{
	BandInteractive: time.Second,
	BandStandard:    4 * time.Second,
	BandBackground:  30 * time.Second,
}

var bandNames = []string{BandInteractive, BandStandard, BandBackground}

// CostAwareScorers are the cost-aware policy's scorers: price first, and
// queue and routed-tokens to spread, within a pool (where every endpoint
// costs the same), the sessions price does not place by their prefix.
var CostAwareScorers = []ScorerConfig{
	{Name: ScorerPrice, Weight: DefaultPriceWeight},
	{Name: ScorerQueue, Weight: 1},
	{Name: ScorerRoutedTokens, Weight: 1},
}

// CostConfig is the price scorer's SLO and prices (routing.cost). It is
// read only when the price scorer runs: by the cost-aware policy, or when
// cache-aware lists "price" among its scorers.
type CostConfig struct {
	// TTFTTargets is each band's time-to-first-token target, by band name
	// (interactive, standard, background): the price scorer prefers the
	// cheapest candidate predicted within its turn's target. Missing
	// bands take DefaultTTFTTargets: 1s, 4s, 30s.
	TTFTTargets map[string]time.Duration `yaml:"ttftTargets" json:"ttftTargets"`
	// Prices are dollars per chip-hour by accelerator catalog name (e.g.
	// a committed-use price), in place of the catalog's list price.
	// Missing: the catalog's.
	Prices map[string]float64 `yaml:"prices" json:"prices"`
	// ExpectedOutputTokens is the output priced for a request that sets
	// no max_tokens. Default 256.
	ExpectedOutputTokens int `yaml:"expectedOutputTokens" json:"expectedOutputTokens"`
	// PriorBatch is the decode batch, in sequences, at which an
	// endpoint's roofline decode throughput is taken until its answers
	// measure it. Default 32.
	PriorBatch int `yaml:"priorBatch" json:"priorBatch"`
}

// ensureDefaults fills zero fields; maps are copied, not shared.
func (c *CostConfig) ensureDefaults() {
	targets := make(map[string]time.Duration, len(bandNames))
	for b, d := range DefaultTTFTTargets {
		targets[b] = d
	}
	for b, d := range c.TTFTTargets {
		if d > 0 {
			targets[b] = d
		}
	}
	c.TTFTTargets = targets
	if c.ExpectedOutputTokens == 0 {
		c.ExpectedOutputTokens = DefaultExpectedOutputTokens
	}
	if c.PriorBatch == 0 {
		c.PriorBatch = DefaultPriorBatch
	}
}

// validate reports every problem of c, each a pools.FieldError.
func (c *CostConfig) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("affinity: %w", pools.FieldErrorf(field, format, args...)))
	}
	for b, d := range c.TTFTTargets {
		if !slices.Contains(bandNames, b) {
			bad("cost.ttftTargets", "unknown band %q (want one of %v)", b, bandNames)
		}
		if d < 0 {
			bad("cost.ttftTargets["+b+"]", "%v is negative", d)
		}
	}
	for acc, p := range c.Prices {
		if !(p >= 0) || math.IsInf(p, 0) {
			bad("cost.prices["+acc+"]", "%v is not a finite number ≥ 0", p)
		}
	}
	if c.ExpectedOutputTokens < 0 {
		bad("cost.expectedOutputTokens", "%d is negative", c.ExpectedOutputTokens)
	}
	if c.PriorBatch < 0 {
		bad("cost.priorBatch", "%d is negative", c.PriorBatch)
	}
	return errors.Join(errs...)
}

// PriceModel is, per endpoint, the dollars a request costs there: the
// chip's price per second times the seconds the request holds it,
//
//	cost = $/s × (uncached / prefill rate + output / decode rate)
//
// where uncached is the prompt's tokens the endpoint must prefill (its
// prefix hit is nearly free), output the request's max_tokens (or
// CostConfig.ExpectedOutputTokens), prefill rate the endpoint's prefill
// throughput learned by the TTFT model, and decode rate its decode
// throughput: tokens a second of the whole batch at the reference batch
// (CostConfig.PriorBatch), learned from answers (a stream's tokens after
// the first, over the time after the first, times the sequences that ran
// with it; scaled from that batch to the reference one by the roofline's
// ratio, so that endpoints measured at different loads compare). Until an endpoint has
// answered, both rates are the roofline of its pool's accelerator and
// model, scaled by how far the measured endpoints are from their own
// roofline (the calibration), so that a measured endpoint and one not
// yet measured compare in the same units. Safe for concurrent use; one
// short mutex.
type PriceModel struct {
	cfg       CostConfig
	smoothing float64
	ttft      *TTFTModel
	metrics   *priceMetrics

	mu struct {
		sync.Mutex
		// by endpoint index, grown on demand
		eps []priceEntry
		// calibration: measured over roofline, mean over measured endpoints
		prefillCal, decodeCal calibration
	}
}

type priceEntry struct {
	prefillMeasured bool
	decodeRate      float64 // tokens/s of the batch; 0 until measured
	gauges          *[2]prometheus.Gauge
}

// calibration is the running mean of measured/prior over endpoints.
type calibration struct {
	sum float64
	n   int
	by  []float64 // by endpoint; 0: none
}

func (c *calibration) set(endpoint int, ratio float64) {
	if !(ratio > 0) || math.IsInf(ratio, 0) {
		return
	}
	if endpoint >= len(c.by) {
		c.by = append(c.by, make([]float64, endpoint+1-len(c.by))...)
	}
	if c.by[endpoint] == 0 {
		c.n++
	}
	c.sum += ratio - c.by[endpoint]
	c.by[endpoint] = ratio
}

func (c *calibration) factor() float64 {
	if c.n == 0 {
		return 1
	}
	return c.sum / float64(c.n)
}

// NewPriceModel returns a model over ttft's learned prefill rates with
// cfg's prices, smoothing each decode measurement by smoothing.
func NewPriceModel(cfg CostConfig, smoothing float64, ttft *TTFTModel) *PriceModel {
	cfg.ensureDefaults()
	return &PriceModel{cfg: cfg, smoothing: smoothing, ttft: ttft, metrics: &priceMetrics{}}
}

func (m *PriceModel) entryLocked(endpoint int) *priceEntry {
	if endpoint >= len(m.mu.eps) {
		m.mu.eps = append(m.mu.eps, make([]priceEntry, endpoint+1-len(m.mu.eps))...)
	}
	return &m.mu.eps[endpoint]
}

// DollarsPerSecond is ep's chip price per second: CostConfig.Prices for
// its accelerator, else the catalog's; 0 when unknown.
func (m *PriceModel) DollarsPerSecond(ep *pools.Endpoint) float64 {
	if p, ok := m.cfg.Prices[ep.Pool.Accelerator.Name]; ok && ep.Pool.Accelerator.Name != "" {
		return p / 3600
	}
	return ep.Pool.DollarsPerHour() / 3600
}

// Rates are ep's prefill and decode throughput, tokens per second, as the
// price model believes them; 0 when unknown.
type Rates struct {
	Prefill, Decode float64
	// Measured says which of them answers measured (the rest are priors).
	PrefillMeasured, DecodeMeasured bool
}

// ratesLocked is Rates under m's lock; it takes the TTFT model's.
func (m *PriceModel) ratesLocked(ep *pools.Endpoint) Rates {
	e := m.entryLocked(ep.Index)
	var r Rates
	if e.prefillMeasured {
		r.Prefill, _ = m.ttft.Coefficients(ep.Index)
		r.PrefillMeasured = true
	} else {
		r.Prefill = ep.Pool.RooflinePrefillRate() * m.mu.prefillCal.factor()
	}
	if e.decodeRate > 0 {
		r.Decode, r.DecodeMeasured = e.decodeRate, true
	} else {
		r.Decode = ep.Pool.RooflineDecodeRate(m.cfg.PriorBatch, DefaultPriorContext) * m.mu.decodeCal.factor()
	}
	return r
}

// Rates returns ep's throughput as the model believes it now.
func (m *PriceModel) Rates(ep *pools.Endpoint) Rates {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ratesLocked(ep)
}

// costLocked is the dollars a request of uncached prompt tokens to
// prefill and output tokens to generate costs on ep; NaN when its price
// or throughput is unknown.
func (m *PriceModel) costLocked(ep *pools.Endpoint, uncached, output float64) float64 {
	dps := m.DollarsPerSecond(ep)
	r := m.ratesLocked(ep)
	if !(dps > 0) || !(r.Prefill > 0) || !(r.Decode > 0) {
		return math.NaN()
	}
	return dps * (uncached/r.Prefill + output/r.Decode)
}

// Cost is costLocked under the lock.
func (m *PriceModel) Cost(ep *pools.Endpoint, uncached, output float64) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.costLocked(ep, uncached, output)
}

// target is the TTFT target of req's band.
func (m *PriceModel) target(req *Request) time.Duration {
	band := req.Band
	if band == "" {
		band = BandStandard
		if req.Interactive {
			band = BandInteractive
		}
	}
	if d, ok := m.cfg.TTFTTargets[band]; ok {
		return d
	}
	return m.cfg.TTFTTargets[BandStandard]
}

// output is the output tokens req is priced for.
func (m *PriceModel) output(req *Request) float64 {
	if req.ExpectedOutputTokens > 0 {
		return float64(req.ExpectedOutputTokens)
	}
	return float64(m.cfg.ExpectedOutputTokens)
}

// Observe learns from an answer of ep: o's usage and time to first token,
// elapsed from the pick to the end of the answer, sequences the batch ran
// beside it when it was picked.
func (m *PriceModel) Observe(ep *pools.Endpoint, o Outcome, elapsed time.Duration, sequences float64) {
	if o.Err != nil || o.PromptTokens <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entryLocked(ep.Index)
	if o.TTFT > 0 && o.PromptTokens > o.CachedTokens {
		e.prefillMeasured = true
		if prior := ep.Pool.RooflinePrefillRate(); prior > 0 {
			rate, _ := m.ttft.Coefficients(ep.Index)
			m.mu.prefillCal.set(ep.Index, rate/prior)
		}
	}
	if decode := elapsed - o.TTFT; o.TTFT > 0 && o.CompletionTokens > 1 && decode > 0 {
		batch := int(max(sequences, 0)) + 1
		sample := float64(o.CompletionTokens-1) / decode.Seconds() * float64(batch)
		// At the reference batch: a chip that ran a small batch is not
		// dearer per token than one that ran a large batch, only less busy.
		if at, ref := ep.Pool.RooflineDecodeRate(batch, DefaultPriorContext), ep.Pool.RooflineDecodeRate(m.cfg.PriorBatch, DefaultPriorContext); at > 0 && ref > 0 {
			sample *= ref / at
		}
		if e.decodeRate > 0 {
			e.decodeRate += m.smoothing * (sample - e.decodeRate)
		} else {
			e.decodeRate = sample
		}
		if prior := ep.Pool.RooflineDecodeRate(m.cfg.PriorBatch, DefaultPriorContext); prior > 0 {
			m.mu.decodeCal.set(ep.Index, e.decodeRate/prior)
		}
	}
	m.publishLocked(ep, e)
}

// publishLocked sets ep's cost gauges: dollars per million tokens of
// prefill and of decode, at the rates believed now.
func (m *PriceModel) publishLocked(ep *pools.Endpoint, e *priceEntry) {
	if m.metrics.cost == nil {
		return
	}
	if e.gauges == nil {
		e.gauges = &[2]prometheus.Gauge{
			m.metrics.cost.WithLabelValues(ep.Pool.Name(), ep.ID, "prefill"),
			m.metrics.cost.WithLabelValues(ep.Pool.Name(), ep.ID, "decode"),
		}
	}
	dps := m.DollarsPerSecond(ep)
	r := m.ratesLocked(ep)
	if dps > 0 && r.Prefill > 0 {
		e.gauges[0].Set(dps / r.Prefill * 1e6)
	}
	if dps > 0 && r.Decode > 0 {
		e.gauges[1].Set(dps / r.Decode * 1e6)
	}
}

// priceMetrics are the price scorer's collectors; nil fields when metrics
// are off.
type priceMetrics struct {
	cost               *prometheus.GaugeVec
	withinSLO, binding prometheus.Counter
}

func newPriceMetrics(r prometheus.Registerer) (*priceMetrics, error) {
	cost := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turnpike_affinity_endpoint_cost_dollars_per_mtok",
		Help: "What a million tokens of prefill or of decode cost on the endpoint, from its chip's price and its measured throughput (the roofline until measured), by pool, endpoint and phase.",
	}, []string{"pool", "endpoint", "phase"})
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_affinity_price_decisions_total",
		Help: "Price scorer runs, by outcome: within-slo (priced among the candidates predicted within the band's TTFT target) or slo-bound (none was: scored by speed).",
	}, []string{"outcome"})
	var err error
	if cost, err = register(r, cost); err != nil {
		return nil, err
	}
	if decisions, err = register(r, decisions); err != nil {
		return nil, err
	}
	return &priceMetrics{cost: cost, withinSLO: decisions.WithLabelValues("within-slo"), binding: decisions.WithLabelValues("slo-bound")}, nil
}

// Price scores each candidate by what the request costs there under the
// band's TTFT target (see PriceModel): among the candidates whose
// predicted time to first token (TTFTModel) is within the target, the
// cheapest scores 1 and one twice as dear 0.5; a candidate predicted past
// the target scores 0 while another is within it. When none is, the
// target binds: each scores fastest/predicted, as ttft-cost does, and the
// faster pool takes the turn. A candidate whose price or throughput is
// unknown costs as the dearest known one; when none is known, every
// candidate within the target scores 1.
type Price struct {
	TierWeights kv.TierWeights
	Model       *PriceModel
}

// Name implements Plugin.
func (*Price) Name() string { return ScorerPrice }

// Score implements Scorer. It does not allocate: scores holds the
// predicted TTFTs first, then the prices.
func (s *Price) Score(c *Cycle, candidates []*pools.Endpoint, scores []float64) {
	m := s.Model
	target := m.target(c.Request).Seconds()
	within := false
	m.ttft.mu.Lock()
	for i, ep := range candidates {
		scores[i] = m.ttft.predictLocked(ep, uncachedTokens(c, ep, &s.TierWeights), c.Now).TTFT.Seconds()
		within = within || scores[i] <= target
	}
	m.ttft.mu.Unlock()
	if !within {
		if m.metrics.binding != nil {
			m.metrics.binding.Inc()
		}
		fastestOver(scores)
		return
	}
	if m.metrics.withinSLO != nil {
		m.metrics.withinSLO.Inc()
	}
	out := m.output(c.Request)
	m.mu.Lock()
	defer m.mu.Unlock()
	// Mark the candidates past the target with -1, then price the rest:
	// the cheapest and dearest known first, then each.
	cheapest, dearest := math.Inf(1), 0.0
	for i, ep := range candidates {
		if scores[i] > target {
			scores[i] = -1
			continue
		}
		if v := m.costLocked(ep, uncachedTokens(c, ep, &s.TierWeights), out); v == v {
			cheapest, dearest = min(cheapest, v), max(dearest, v)
		}
	}
	for i, ep := range candidates {
		if scores[i] < 0 {
			scores[i] = 0
			continue
		}
		v := m.costLocked(ep, uncachedTokens(c, ep, &s.TierWeights), out)
		switch {
		case dearest == 0:
			scores[i] = 1 // nothing known: the target alone decides
		case v != v:
			scores[i] = cheapest / dearest
		case v == 0:
			scores[i] = 1
		default:
			scores[i] = cheapest / v
		}
	}
}

// String describes the rates, for tests and logs.
func (r Rates) String() string {
	mark := func(v float64, measured bool) string {
		s := strconv.FormatFloat(v, 'f', 0, 64)
		if !measured {
			s += " (prior)"
		}
		return s
	}
	return "prefill " + mark(r.Prefill, r.PrefillMeasured) + " tokens/s, decode " + mark(r.Decode, r.DecodeMeasured) + " tokens/s"
}

var _ Scorer = (*Price)(nil)
