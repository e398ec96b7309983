package scrape

import (
	"context"
	"io"
	"math"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The gateway's account of the cached tokens it predicted against those
// the engines reported (docs/cache.md).
const (
	cacheErrorShare = "turnpike_affinity_cache_prediction_error_share"
	cachePredicted  = "turnpike_affinity_predicted_cached_tokens"
	cacheDelivered  = "turnpike_affinity_actual_cached_tokens"
	cacheResults    = "turnpike_affinity_cache_predictions_total"
	cacheMisses     = "turnpike_affinity_cache_misses_total"
)

// WithinShare is the error, over the prompt's tokens, within which a
// prediction counts as right: CachePrediction.Within.
const WithinShare = 0.05

// CachePrediction is the gateway's account, over a run, of the prompt
// tokens it predicted cached on the endpoints it picked against the
// engines' cached_tokens: the difference of two scrapes.
type CachePrediction struct {
	// Turns are the turns answered with usage whose prompt was looked up
	// in the KV-cache index.
	Turns float64 `json:"turns"`
	// Within are the turns whose |predicted − delivered| was at most
	// WithinShare of the prompt's tokens; WithinShare their share of
	// Turns.
	Within      float64 `json:"within_5pct"`
	WithinShare float64 `json:"within_5pct_share"`
	// PredictedTokens and DeliveredTokens sum the tokens predicted cached
	// and those the engines reported cached.
	PredictedTokens float64 `json:"predicted_tokens"`
	DeliveredTokens float64 `json:"delivered_tokens"`
	// Results are the turns by result (hit: within one block, miss: the
	// engine cached fewer, surplus: more); Misses the misses by cause.
	Results map[string]float64 `json:"results"`
	Misses  map[string]float64 `json:"misses"`
}

// MissesByCause sums Misses, which should equal Results["miss"].
func (c *CachePrediction) MissesByCause() float64 {
	var n float64
	for _, v := range c.Misses {
		n += v
	}
	return n
}

// ScrapeCachePrediction reads the gateway's /metrics at url for its
// cache prediction counters, as they stand.
func ScrapeCachePrediction(ctx context.Context, url string) (*CachePrediction, error) {
	fams, err := Families(ctx, &http.Client{Timeout: 10 * time.Second}, url)
	if err != nil {
		return nil, err
	}
	return cachePredictionOf(fams), nil
}

// ParseCachePrediction is ScrapeCachePrediction over a Prometheus text
// exposition.
func ParseCachePrediction(r io.Reader) (*CachePrediction, error) {
	fams, err := parseFamilies(r)
	if err != nil {
		return nil, err
	}
	return cachePredictionOf(fams), nil
}

func cachePredictionOf(fams map[string]*dto.MetricFamily) *CachePrediction {
	c := &CachePrediction{Results: map[string]float64{}, Misses: map[string]float64{}}
	for _, m := range fams[cacheErrorShare].GetMetric() {
		h := m.GetHistogram()
		c.Turns += float64(h.GetSampleCount())
		for _, b := range h.GetBucket() {
			if math.Abs(b.GetUpperBound()-WithinShare) < 1e-9 {
				c.Within += float64(b.GetCumulativeCount())
			}
		}
	}
	for _, m := range fams[cachePredicted].GetMetric() {
		c.PredictedTokens += m.GetHistogram().GetSampleSum()
	}
	for _, m := range fams[cacheDelivered].GetMetric() {
		c.DeliveredTokens += m.GetHistogram().GetSampleSum()
	}
	for _, name := range []string{cacheResults, Key(cacheResults)} {
		byLabel(fams, name, "result", c.Results)
	}
	for _, name := range []string{cacheMisses, Key(cacheMisses)} {
		byLabel(fams, name, "cause", c.Misses)
	}
	return c
}

// CachePredictionDelta is what happened between the scrapes before and
// after; nil when either is missing or no turn was predicted in between.
func CachePredictionDelta(before, after *CachePrediction) *CachePrediction {
	if before == nil || after == nil || after.Turns-before.Turns <= 0 {
		return nil
	}
	d := &CachePrediction{
		Turns:           after.Turns - before.Turns,
		Within:          after.Within - before.Within,
		PredictedTokens: after.PredictedTokens - before.PredictedTokens,
		DeliveredTokens: after.DeliveredTokens - before.DeliveredTokens,
		Results:         map[string]float64{},
		Misses:          map[string]float64{},
	}
	d.WithinShare = d.Within / d.Turns
	for k, v := range after.Results {
		if n := v - before.Results[k]; n > 0 {
			d.Results[k] = n
		}
	}
	for k, v := range after.Misses {
		if n := v - before.Misses[k]; n > 0 {
			d.Misses[k] = n
		}
	}
	return d
}
