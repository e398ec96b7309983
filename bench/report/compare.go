package report

import (
	"slices"

	"github.com/turnpike-gateway/turnpike/bench/driver"
)

// Comparison is the same workload run once per policy, or Repeat times
// per policy, with each policy's ratios to the baseline.
type Comparison struct {
	// Baseline is the policy the ratios are against: "round-robin" when it
	// ran, else the first policy.
	Baseline string    `json:"baseline"`
	Results  []*Result `json:"results"`
	Ratios   []Ratio   `json:"ratios"`
	// Repeat is how many times each policy ran (Results holds every run,
	// each marked with its Run); 0 when once.
	Repeat int `json:"repeat,omitempty"`
	// Medians are each policy's figures, the median over its runs, and
	// how many of its runs were at least as good as the baseline's run of
	// the same repetition; only when Repeat > 1.
	Medians []PolicyMedian `json:"medians,omitempty"`
}

// Ratio compares one policy with the baseline. A ratio whose baseline
// figure is zero is reported as 0.
type Ratio struct {
	Policy string `json:"policy"`
	// TTFTP50ReductionPct and TTFTP99ReductionPct are how much lower the
	// policy's TTFT is, in percent of the baseline's (negative: higher).
	TTFTP50ReductionPct float64 `json:"ttft_p50_reduction_pct"`
	TTFTP99ReductionPct float64 `json:"ttft_p99_reduction_pct"`
	// ITLP99LowerX is the baseline's ITL p99 over the policy's: how many
	// times lower the policy's tail inter-token latency is.
	ITLP99LowerX float64 `json:"itl_p99_lower_x"`
	// EngineITLP99LowerX is the same of the engines' own ITL p99 (their
	// histograms), 0 when either run has none.
	EngineITLP99LowerX float64 `json:"engine_itl_p99_lower_x,omitempty"`
	// EngineTTFTP50LowerX is the baseline's engine TTFT p50 over the
	// policy's, 0 when either run has none.
	EngineTTFTP50LowerX float64 `json:"engine_ttft_p50_lower_x,omitempty"`
	// ThroughputX is output tokens/s over the baseline's.
	ThroughputX float64 `json:"throughput_x"`
	// HitRateX is the engines' prefix-cache hit rate over the baseline's.
	HitRateX float64 `json:"hit_rate_x"`
	// CachedShareX is the usage cached-token share over the baseline's.
	CachedShareX float64 `json:"cached_share_x"`
}

// PolicyMedian is one policy's figures over the runs of a repeated
// comparison: each the median of its runs' (Percentile 50: the mean of
// the middle two for an even count).
type PolicyMedian struct {
	Policy string `json:"policy"`
	Runs   int    `json:"runs"`
	// TTFT percentiles in ms, output tokens/s, failed requests and
	// idle-while-queued seconds (-1 when the runs had no occupancy).
	TTFTP50Ms              float64 `json:"ttft_p50_ms"`
	TTFTP90Ms              float64 `json:"ttft_p90_ms"`
	TTFTP99Ms              float64 `json:"ttft_p99_ms"`
	OutputTokensPerSec     float64 `json:"output_tokens_per_sec"`
	Errors                 float64 `json:"errors"`
	IdleWhileQueuedSeconds float64 `json:"idle_while_queued_seconds"`
	// AtLeastAsGood counts, for each figure (the names in medianFigures),
	// the runs in which this policy did at least as well as the
	// baseline's run of the same repetition; Compared the runs where both
	// had the figure.
	AtLeastAsGood map[string]int `json:"at_least_as_good"`
	Compared      map[string]int `json:"compared"`
}

// medianFigures are the figures a repeated comparison takes the median of,
// in report order: each one's name, its label in a report, its value in a
// run (ok false when the run has none), whether higher is better, and
// where a PolicyMedian keeps it.
var medianFigures = []struct {
	name, label string
	value       func(*Result) (float64, bool)
	higher      bool
	field       func(*PolicyMedian) *float64
}{
	{"ttft_p50", "p50", func(r *Result) (float64, bool) { return r.Total.TTFT.P50Ms, true }, false,
		func(m *PolicyMedian) *float64 { return &m.TTFTP50Ms }},
	{"ttft_p90", "p90", func(r *Result) (float64, bool) { return r.Total.TTFT.P90Ms, true }, false,
		func(m *PolicyMedian) *float64 { return &m.TTFTP90Ms }},
	{"ttft_p99", "p99", func(r *Result) (float64, bool) { return r.Total.TTFT.P99Ms, true }, false,
		func(m *PolicyMedian) *float64 { return &m.TTFTP99Ms }},
	{"throughput", "out tok/s", func(r *Result) (float64, bool) { return r.Total.OutputTokensPerSec, true }, true,
		func(m *PolicyMedian) *float64 { return &m.OutputTokensPerSec }},
	{"errors", "errors", func(r *Result) (float64, bool) { return float64(r.Total.Errors), true }, false,
		func(m *PolicyMedian) *float64 { return &m.Errors }},
	{"idle_while_queued", "idle", func(r *Result) (float64, bool) {
		if r.Occupancy == nil {
			return 0, false
		}
		return float64(r.Occupancy.IdleWhileQueuedSeconds), true
	}, false, func(m *PolicyMedian) *float64 { return &m.IdleWhileQueuedSeconds }},
}

// Compared compares results, the runs of policies, each run repeat times
// (Result.Run numbering the repetitions when repeat > 1): every result
// against the baseline's of the same repetition and, when repeated, each
// policy's medians.
func Compared(results []*Result, policies []string, repeat int) *Comparison {
	c := &Comparison{Results: results}
	if repeat > 1 {
		c.Repeat = repeat
	}
	c.computeRatios()
	c.computeMedians(policies)
	return c
}

// baselineIn is, among results, baseline's result of r's run.
func baselineIn(results []*Result, baseline string, r *Result) *Result {
	for _, b := range results {
		if b.Policy == baseline && b.Run == r.Run {
			return b
		}
	}
	return nil
}

// computeRatios fills Baseline and Ratios from Results: each result
// against the baseline's result of the same run.
func (c *Comparison) computeRatios() {
	if len(c.Results) == 0 {
		return
	}
	c.Baseline = c.Results[0].Policy
	if slices.ContainsFunc(c.Results, func(r *Result) bool { return r.Policy == BaselinePolicy }) {
		c.Baseline = BaselinePolicy
	}
	c.Ratios = c.Ratios[:0]
	for _, r := range c.Results {
		base := baselineIn(c.Results, c.Baseline, r)
		if base == nil {
			continue
		}
		c.Ratios = append(c.Ratios, Ratio{
			Policy:              r.Name(),
			TTFTP50ReductionPct: reduction(base.Total.TTFT.P50Ms, r.Total.TTFT.P50Ms),
			TTFTP99ReductionPct: reduction(base.Total.TTFT.P99Ms, r.Total.TTFT.P99Ms),
			ITLP99LowerX:        ratio(base.Total.ITL.P99Ms, r.Total.ITL.P99Ms),
			EngineITLP99LowerX:  ratio(engineITLP99(base), engineITLP99(r)),
			EngineTTFTP50LowerX: ratio(engineTTFTP50(base), engineTTFTP50(r)),
			ThroughputX:         ratio(r.Total.OutputTokensPerSec, base.Total.OutputTokensPerSec),
			HitRateX:            ratio(hitRate(r), hitRate(base)),
			CachedShareX:        ratio(r.Total.CachedTokenShare, base.Total.CachedTokenShare),
		})
	}
}

// computeMedians fills Medians, policy by policy, when the runs repeat.
func (c *Comparison) computeMedians(policies []string) {
	c.Medians = nil
	if c.Repeat < 2 {
		return
	}
	for _, p := range policies {
		m := PolicyMedian{Policy: p, AtLeastAsGood: map[string]int{}, Compared: map[string]int{}, IdleWhileQueuedSeconds: -1}
		cols := make([][]float64, len(medianFigures))
		for _, r := range c.Results {
			if r.Policy != p {
				continue
			}
			m.Runs++
			base := baselineIn(c.Results, c.Baseline, r)
			for i, f := range medianFigures {
				v, ok := f.value(r)
				if !ok {
					continue
				}
				cols[i] = append(cols[i], v)
				if base == nil {
					continue
				}
				b, ok := f.value(base)
				if !ok {
					continue
				}
				// Every figure compared has a count, none included.
				m.Compared[f.name]++
				n := m.AtLeastAsGood[f.name]
				if f.higher && v >= b || !f.higher && v <= b {
					n++
				}
				m.AtLeastAsGood[f.name] = n
			}
		}
		for i, f := range medianFigures {
			if len(cols[i]) > 0 {
				slices.Sort(cols[i])
				*f.field(&m) = driver.Percentile(cols[i], 50)
			}
		}
		c.Medians = append(c.Medians, m)
	}
}

// engineTTFTP50 is the engines' own TTFT p50 of r, 0 when unknown.
func engineTTFTP50(r *Result) float64 {
	if r.Engines == nil {
		return 0
	}
	return r.Engines.TTFTP50Ms
}

// engineITLP99 is the engines' own ITL p99 of r, 0 when unknown.
func engineITLP99(r *Result) float64 {
	if r.Engines == nil {
		return 0
	}
	return r.Engines.ITLP99Ms
}

// hitRate is the engines' hit rate of r, 0 when unknown.
func hitRate(r *Result) float64 {
	if r.Engines == nil {
		return 0
	}
	return r.Engines.HitRate
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func reduction(base, v float64) float64 {
	if base == 0 {
		return 0
	}
	return (base - v) / base * 100
}

// BaselinePolicy is the policy Compare measures every other policy against.
const BaselinePolicy = "round-robin"
