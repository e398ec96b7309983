package rollout

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Fleet replaces the replicas of the gateway's fleet, in steps.
type Fleet interface {
	// Replicas is how many replicas the rollout replaces.
	Replicas() int
	// Steps is how many steps it replaces them in, numbered from 0: one
	// replica each, or several replaced together (a prefiller and a
	// decoder).
	Steps() int
	// Replace replaces step i's replicas by ones of revision rev: the
	// new ones join the gateway's fleet and take traffic, then the old
	// ones leave and drain, and are stopped once the gateway has no
	// hand-off pending for them (turnpike_session_handoffs_pending). It
	// returns once all that has happened.
	Replace(ctx context.Context, i int, rev string) error
}

// Defaults of Options.
const (
	DefaultRevision = "v2"
	DefaultStartAt  = 0.25
	DefaultEvery    = 0.1
)

// Options tune a rollout.
type Options struct {
	// Revision is the new replicas' revision. Default "v2".
	Revision string `json:"revision"`
	// StartAt is the share of the run's turns answered before the first
	// step; Every the share answered between two. Defaults 0.25 and 0.1:
	// four steps are done by two thirds of the run.
	StartAt float64 `json:"start_at"`
	Every   float64 `json:"every"`
}

func (o *Options) ensureDefaults() {
	if o.Revision == "" {
		o.Revision = DefaultRevision
	}
	if o.StartAt == 0 {
		o.StartAt = DefaultStartAt
	}
	if o.Every == 0 {
		o.Every = DefaultEvery
	}
}

// Replacement is one step's replacement, from the run's start.
type Replacement struct {
	Step      int     `json:"step"`
	StartedAt float64 `json:"started_at_seconds"`
	DoneAt    float64 `json:"done_at_seconds"`
	Error     string  `json:"error,omitempty"`
}

// Phase is the turns sent before, during or after the rollout.
type Phase struct {
	Name   string `json:"name"`
	Turns  int    `json:"turns"`
	Failed int    `json:"failed"`
	// TTFT percentiles of the answered turns, client-side, in ms.
	TTFTP50 float64 `json:"ttft_p50_ms"`
	TTFTP95 float64 `json:"ttft_p95_ms"`
	// CachedShare is the engines' cached prompt tokens over prompt tokens.
	CachedShare float64 `json:"cached_share"`
}

// Report is what a rollout did to the sessions and what the gateway did.
type Report struct {
	Options Options `json:"options"`
	// Replicas is how many replicas were replaced, in Replacements' steps.
	Replicas     int           `json:"replicas"`
	Replacements []Replacement `json:"replacements"`
	Phases       []Phase       `json:"phases"`
	// Failed counts every failed turn.
	Failed int `json:"failed"`
	// HandOffs and WarmUps are the gateway's counters over the run, the
	// warm-ups by result; CrossRevisionLegs its prefill legs on another
	// revision than their decoder's.
	HandOffs          float64            `json:"handoffs"`
	WarmUps           map[string]float64 `json:"warmups"`
	CrossRevisionLegs float64            `json:"cross_revision_pd_legs"`
	// SteadyTTFTP50 is the gateway's TTFT median before the rollout;
	// HandOffTTFTP50 that of the handed-over sessions' next turns
	// (HandOffTurns of them), both in ms, read from its histograms; Ratio
	// the second over the first.
	SteadyTTFTP50  float64 `json:"steady_ttft_p50_ms"`
	HandOffTTFTP50 float64 `json:"handoff_ttft_p50_ms"`
	HandOffTurns   int     `json:"handoff_turns"`
	Ratio          float64 `json:"handoff_ttft_ratio"`
	// DuringTTFTP50 is the gateway's TTFT median of the other turns, those
	// not a hand-off's next, from the first step's start to the last's
	// end, in ms; DuringRatio HandOffTTFTP50 over it. Where the fleet's
	// TTFT moves during the run for reasons of its own (its KV cache
	// filling up as the sessions' prompts grow), it is the steady state
	// the hand-offs happen in.
	DuringTTFTP50 float64  `json:"during_ttft_p50_ms"`
	DuringRatio   float64  `json:"during_handoff_ttft_ratio"`
	GatewayErrors []string `json:"gateway_errors,omitempty"`
	// Runs is how many runs Pool pooled; 1 for a run's own report.
	Runs int `json:"runs"`

	// steady, next and during are the TTFT histograms the medians above
	// come from, kept for Pool.
	steady, next, during []bucket
}

// Gateway metric names the report reads.
const (
	metricTTFT     = "turnpike_revision_ttft_seconds"
	metricNextTurn = "turnpike_handoff_next_turn_ttft_seconds"
	metricHandOffs = "turnpike_session_handoffs_total"
	metricWarmUps  = "turnpike_warmups_total"
	metricCrossed  = "turnpike_pd_cross_revision_legs_total"
)

// Run runs the agentic sessions while fleet's replicas are replaced one at
// a time by replicas of opts.Revision.
func Run(ctx context.Context, cfg workload.Config, target driver.Target, fleet Fleet, opts Options, label string) (*driver.Result, *Report, error) {
	opts.ensureDefaults()
	if fleet == nil || fleet.Steps() == 0 {
		return nil, nil, fmt.Errorf("bench: rollout needs a fleet to replace")
	}
	gw := target.GatewayMetrics()
	rep := &Report{Options: opts, Replicas: fleet.Replicas(), WarmUps: map[string]float64{}, Runs: 1}
	scrapeGW := func() map[string]*dto.MetricFamily {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		fams, err := scrape.Families(sctx, http.DefaultClient, gw)
		if err != nil {
			rep.GatewayErrors = append(rep.GatewayErrors, err.Error())
		}
		return fams
	}
	first := scrapeGW()
	var atFirst, atLast map[string]*dto.MetricFamily
	sessions := workload.PlanAgentic(cfg)
	total := len(sessions) * cfg.Agentic.TurnsPerSession
	var replacements []Replacement
	res, samples := driver.Measure(ctx, cfg, target, label, total, func(ctx context.Context, dr *driver.Runner) {
		done := make(chan struct{})
		rctx, stop := context.WithCancel(ctx)
		go func() {
			defer close(done)
			at := func() float64 { return time.Since(dr.Started()).Seconds() }
			for i := range fleet.Steps() {
				share := opts.StartAt + float64(i)*opts.Every
				if !dr.AwaitRecorded(rctx, int(share*float64(total))) {
					return
				}
				if i == 0 {
					atFirst = scrapeGW()
				}
				r := Replacement{Step: i, StartedAt: at()}
				if err := fleet.Replace(rctx, i, opts.Revision); err != nil {
					r.Error = err.Error()
				}
				r.DoneAt = at()
				replacements = append(replacements, r)
			}
			atLast = scrapeGW()
		}()
		dr.Sessions(ctx, sessions)
		stop()
		<-done
	})
	last := scrapeGW()
	rep.Replacements = replacements
	rep.phases(samples)
	rep.gateway(first, atFirst, atLast, last)
	return res, rep, nil
}

// phases splits the samples by when they were sent: before the first
// replacement started, until the last ended, after.
func (rep *Report) phases(samples []*driver.Sample) {
	begin, end := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	if n := len(rep.Replacements); n > 0 {
		begin = time.Duration(rep.Replacements[0].StartedAt * float64(time.Second))
		end = time.Duration(rep.Replacements[n-1].DoneAt * float64(time.Second))
	}
	groups := map[string][]*driver.Sample{}
	for _, s := range samples {
		switch {
		case s.Start < begin:
			groups["before"] = append(groups["before"], s)
		case s.Start < end:
			groups["during"] = append(groups["during"], s)
		default:
			groups["after"] = append(groups["after"], s)
		}
	}
	for _, name := range []string{"before", "during", "after"} {
		p := Phase{Name: name}
		var ttfts []float64
		var prompt, cached int
		for _, s := range groups[name] {
			p.Turns++
			if s.Error != "" {
				p.Failed++
				continue
			}
			if s.TTFT > 0 {
				ttfts = append(ttfts, float64(s.TTFT)/float64(time.Millisecond))
			}
			prompt += s.InputTokens
			cached += s.CachedTokens
		}
		sort.Float64s(ttfts)
		p.TTFTP50, p.TTFTP95 = driver.Percentile(ttfts, 50), driver.Percentile(ttfts, 95)
		if prompt > 0 {
			p.CachedShare = float64(cached) / float64(prompt)
		}
		rep.Failed += p.Failed
		rep.Phases = append(rep.Phases, p)
	}
}

// gateway reads the gateway's counters over the run and its TTFT
// histograms: the steady state from first to atFirst, the hand-offs'
// next turns over the run, the other turns from atFirst to atLast.
func (rep *Report) gateway(first, atFirst, atLast, last map[string]*dto.MetricFamily) {
	rep.HandOffs = sum(last, metricHandOffs, nil) - sum(first, metricHandOffs, nil)
	for _, r := range []string{"sent", "failed", "budget", "busy", "cached"} {
		match := map[string]string{"result": r}
		if v := sum(last, metricWarmUps, match) - sum(first, metricWarmUps, match); v > 0 {
			rep.WarmUps[r] = v
		}
	}
	rep.CrossRevisionLegs = sum(last, metricCrossed, nil) - sum(first, metricCrossed, nil)
	if atFirst != nil {
		rep.steady = delta(histogram(atFirst, metricTTFT), histogram(first, metricTTFT))
	}
	if atFirst != nil && atLast != nil {
		all := delta(histogram(atLast, metricTTFT), histogram(atFirst, metricTTFT))
		next := delta(histogram(atLast, metricNextTurn), histogram(atFirst, metricNextTurn))
		rep.during = delta(all, next)
	}
	rep.next = delta(histogram(last, metricNextTurn), histogram(first, metricNextTurn))
	rep.medians()
}

// medians computes the TTFT medians and their ratios from the histograms.
func (rep *Report) medians() {
	rep.SteadyTTFTP50, _ = median(rep.steady)
	rep.DuringTTFTP50, _ = median(rep.during)
	rep.HandOffTTFTP50, rep.HandOffTurns = median(rep.next)
	rep.Ratio, rep.DuringRatio = 0, 0
	if rep.SteadyTTFTP50 > 0 {
		rep.Ratio = rep.HandOffTTFTP50 / rep.SteadyTTFTP50
	}
	if rep.DuringTTFTP50 > 0 {
		rep.DuringRatio = rep.HandOffTTFTP50 / rep.DuringTTFTP50
	}
}

// Pool is the report of reps, runs of one mode, taken together: counts
// added up, each phase's TTFT percentiles the median of the runs', and
// the gateway's medians (the steady state, the hand-offs' next turns, the
// other turns during) read from the runs' histograms added up, so that a
// median stands on every run's turns, not on one run's few.
func Pool(reps []*Report) *Report {
	if len(reps) == 1 {
		return reps[0]
	}
	out := &Report{Options: reps[0].Options, Replicas: reps[0].Replicas, WarmUps: map[string]float64{}}
	for _, r := range reps {
		out.Runs += r.Runs
		out.Replacements = append(out.Replacements, r.Replacements...)
		out.Failed += r.Failed
		out.HandOffs += r.HandOffs
		out.CrossRevisionLegs += r.CrossRevisionLegs
		for k, v := range r.WarmUps {
			out.WarmUps[k] += v
		}
		out.GatewayErrors = append(out.GatewayErrors, r.GatewayErrors...)
		out.steady, out.next, out.during = add(out.steady, r.steady), add(out.next, r.next), add(out.during, r.during)
	}
	for k := range reps[0].Phases {
		p := Phase{Name: reps[0].Phases[k].Name}
		var p50, p95, cached []float64
		for _, r := range reps {
			q := r.Phases[k]
			p.Turns += q.Turns
			p.Failed += q.Failed
			p50, p95, cached = append(p50, q.TTFTP50), append(p95, q.TTFTP95), append(cached, q.CachedShare)
		}
		for _, xs := range [][]float64{p50, p95, cached} {
			sort.Float64s(xs)
		}
		p.TTFTP50, p.TTFTP95, p.CachedShare = driver.Percentile(p50, 50), driver.Percentile(p95, 50), driver.Percentile(cached, 50)
		out.Phases = append(out.Phases, p)
	}
	out.medians()
	return out
}

// add is a and b, histograms of the same buckets, added bucket by bucket;
// either may be empty.
func add(a, b []bucket) []bucket {
	if len(a) == 0 {
		return slices.Clone(b)
	}
	sum := map[float64]float64{}
	for _, x := range b {
		sum[x.le] = x.count
	}
	out := make([]bucket, 0, len(a))
	for _, x := range a {
		out = append(out, bucket{x.le, x.count + sum[x.le]})
	}
	return out
}

// sum adds up the counter name's series whose labels match.
func sum(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	total := 0.0
	for _, m := range fams[name].GetMetric() {
		if matches(m, match) {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

func matches(m *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		ok := false
		for _, l := range m.GetLabel() {
			ok = ok || l.GetName() == k && l.GetValue() == v
		}
		if !ok {
			return false
		}
	}
	return true
}

// bucket is a histogram's cumulative count at an upper bound.
type bucket struct {
	le    float64
	count float64
}

// histogram merges the series of histogram name into one.
func histogram(fams map[string]*dto.MetricFamily, name string) []bucket {
	byLE := map[float64]float64{}
	for _, m := range fams[name].GetMetric() {
		for _, b := range m.GetHistogram().GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				byLE[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		// The count is the +Inf bucket's, which the text leaves implicit.
		byLE[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
	}
	var out []bucket
	for le, c := range byLE {
		out = append(out, bucket{le, c})
	}
	slices.SortFunc(out, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	return out
}

// delta is hist less base, bucket by bucket: the observations between
// two reads of a histogram, or those of one histogram less another's
// (of the same buckets). A bound base lacks counts in full.
func delta(hist, base []bucket) []bucket {
	prior := map[float64]float64{}
	for _, b := range base {
		prior[b.le] = b.count
	}
	out := make([]bucket, 0, len(hist))
	for _, b := range hist {
		out = append(out, bucket{b.le, b.count - prior[b.le]})
	}
	return out
}

// median is the median, in ms, of the observations in hist, interpolated
// within its bucket, and how many observations there were.
func median(hist []bucket) (float64, int) {
	var bounds, counts []float64
	for _, b := range hist {
		bounds = append(bounds, b.le)
		counts = append(counts, b.count)
	}
	if len(counts) == 0 || counts[len(counts)-1] <= 0 {
		return 0, 0
	}
	return scrape.HistogramQuantile(0.5, bounds, counts) * 1000, int(counts[len(counts)-1])
}
