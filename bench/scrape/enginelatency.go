package scrape

import (
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
)

// Engine latency histograms the benchmark reads: the engines' own
// inter-token latency, in their clock (simulated seconds for the
// simulator, unscaled), free of the load generator's and the host's
// scheduling noise.
const (
	vllmITL    = enginemetrics.VLLMInterTokenLatency
	sglangITL  = enginemetrics.SGLangInterTokenLatency
	vllmTTFT   = enginemetrics.VLLMTimeToFirstToken
	sglangTTFT = enginemetrics.SGLangTimeToFirstToken
)

// latencyHistograms are the histograms ParseEngineMetrics keeps.
var latencyHistograms = map[string]bool{vllmITL: true, sglangITL: true, vllmTTFT: true, sglangTTFT: true}

// bucketSep joins a histogram's name and a bucket's upper bound in an
// EngineMetrics key.
const bucketSep = "_bucket:"

// addBuckets adds a histogram's cumulative bucket counts to out, keyed
// name + bucketSep + upper bound.
func addBuckets(out EngineMetrics, name string, m *dto.Metric) {
	h := m.GetHistogram()
	if h == nil {
		return
	}
	for _, b := range h.GetBucket() {
		out[name+bucketSep+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] += float64(b.GetCumulativeCount())
	}
}

// histogramDelta is the run's cumulative bucket counts of histogram name
// summed over engines: bounds ascending, counts cumulative.
func histogramDelta(before, after []EngineMetrics, name string) (bounds, counts []float64) {
	sums := map[float64]float64{}
	for i := range after {
		if i >= len(before) || before[i] == nil || after[i] == nil {
			continue
		}
		for k, av := range after[i] {
			le, ok := strings.CutPrefix(k, name+bucketSep)
			if !ok {
				continue
			}
			ub, err := strconv.ParseFloat(le, 64)
			if err != nil {
				continue
			}
			d := av - before[i][k]
			if d < 0 {
				d = av // the engine restarted
			}
			sums[ub] += d
		}
	}
	for ub := range sums {
		bounds = append(bounds, ub)
	}
	slices.Sort(bounds)
	for _, ub := range bounds {
		counts = append(counts, sums[ub])
	}
	return bounds, counts
}

// HistogramQuantile is the q quantile (0..1) of cumulative buckets,
// linear within a bucket as Prometheus' histogram_quantile; 0 when empty.
// A quantile in the +Inf bucket is the last finite bound.
func HistogramQuantile(q float64, bounds, counts []float64) float64 {
	if len(counts) == 0 || counts[len(counts)-1] == 0 {
		return 0
	}
	rank := q * counts[len(counts)-1]
	for i, c := range counts {
		if c < rank {
			continue
		}
		if math.IsInf(bounds[i], 1) {
			if i == 0 {
				return 0
			}
			return bounds[i-1]
		}
		lo, prev := 0.0, 0.0
		if i > 0 {
			lo, prev = bounds[i-1], counts[i-1]
		}
		if c == prev {
			return bounds[i]
		}
		return lo + (bounds[i]-lo)*(rank-prev)/(c-prev)
	}
	return bounds[len(bounds)-1]
}

// engineITL sets the engines' own ITL and TTFT quantiles on ec.
func engineITL(ec *EngineCache, before, after []EngineMetrics) {
	quantiles := func(names []string, p50, p99 *float64) {
		for _, name := range names {
			bounds, counts := histogramDelta(before, after, name)
			if len(counts) == 0 || counts[len(counts)-1] == 0 {
				continue
			}
			*p50 = HistogramQuantile(0.5, bounds, counts) * 1000
			*p99 = HistogramQuantile(0.99, bounds, counts) * 1000
			return
		}
	}
	quantiles([]string{vllmITL, sglangITL}, &ec.ITLP50Ms, &ec.ITLP99Ms)
	quantiles([]string{vllmTTFT, sglangTTFT}, &ec.TTFTP50Ms, &ec.TTFTP99Ms)
}
