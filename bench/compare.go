package bench

import (
	"context"
	"errors"
	"fmt"
)

// Comparison is the same workload run once per policy, with each policy's
// ratios to the baseline.
type Comparison struct {
	// Baseline is the policy the ratios are against: "round-robin" when it
	// ran, else the first policy.
	Baseline string    `json:"baseline"`
	Results  []*Result `json:"results"`
	Ratios   []Ratio   `json:"ratios"`
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

// Compare runs cfg's workload once per policy. For each policy it calls
// start to bring up a fresh fleet running that policy (fresh engine caches),
// runs against the Target start returns, then calls the stop function start
// returned. A policy whose start fails stops the comparison with an error;
// the stop function is always called once start succeeded.
func Compare(ctx context.Context, cfg Config, policies []string, start func(ctx context.Context, policy string) (Target, func() error, error)) (*Comparison, error) {
	if len(policies) == 0 {
		return nil, errors.New("bench: compare: no policies")
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cmp := &Comparison{}
	for _, p := range policies {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bench: compare: %w", err)
		}
		res, err := runPolicy(ctx, cfg, p, start)
		if err != nil {
			return nil, err
		}
		cmp.Results = append(cmp.Results, res)
	}
	cmp.computeRatios()
	return cmp, nil
}

func runPolicy(ctx context.Context, cfg Config, policy string, start func(context.Context, string) (Target, func() error, error)) (res *Result, err error) {
	target, stop, err := start(ctx, policy)
	if err != nil {
		return nil, fmt.Errorf("bench: compare: starting %s: %w", policy, err)
	}
	defer func() {
		if stop == nil {
			return
		}
		if serr := stop(); serr != nil && err == nil {
			err = fmt.Errorf("bench: compare: stopping %s: %w", policy, serr)
		}
	}()
	res, err = run(ctx, cfg, target, policy)
	if err != nil {
		return nil, fmt.Errorf("bench: compare: %s: %w", policy, err)
	}
	res.Policy = policy
	return res, nil
}

// computeRatios fills Baseline and Ratios from Results.
func (c *Comparison) computeRatios() {
	if len(c.Results) == 0 {
		return
	}
	base := c.Results[0]
	for _, r := range c.Results {
		if r.Policy == BaselinePolicy {
			base = r
			break
		}
	}
	c.Baseline = base.Policy
	c.Ratios = c.Ratios[:0]
	for _, r := range c.Results {
		c.Ratios = append(c.Ratios, Ratio{
			Policy:              r.Policy,
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
