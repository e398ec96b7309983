package scrape

import (
	"reflect"
	"strings"
	"testing"
)

const cacheBefore = `# TYPE turnpike_affinity_cache_prediction_error_share histogram
turnpike_affinity_cache_prediction_error_share_bucket{le="0"} 2
turnpike_affinity_cache_prediction_error_share_bucket{le="0.05"} 3
turnpike_affinity_cache_prediction_error_share_bucket{le="+Inf"} 4
turnpike_affinity_cache_prediction_error_share_sum 0.5
turnpike_affinity_cache_prediction_error_share_count 4
# TYPE turnpike_affinity_predicted_cached_tokens histogram
turnpike_affinity_predicted_cached_tokens_bucket{le="+Inf"} 4
turnpike_affinity_predicted_cached_tokens_sum 1000
turnpike_affinity_predicted_cached_tokens_count 4
# TYPE turnpike_affinity_actual_cached_tokens histogram
turnpike_affinity_actual_cached_tokens_bucket{le="+Inf"} 4
turnpike_affinity_actual_cached_tokens_sum 800
turnpike_affinity_actual_cached_tokens_count 4
# TYPE turnpike_affinity_cache_predictions_total counter
turnpike_affinity_cache_predictions_total{result="hit"} 3
turnpike_affinity_cache_predictions_total{result="miss"} 1
# TYPE turnpike_affinity_cache_misses_total counter
turnpike_affinity_cache_misses_total{cause="evicted"} 1
turnpike_affinity_cache_misses_total{cause="unknown"} 0
`

// TestCachePredictionDelta: the turns between two scrapes, those within
// 5% of their prompt, and the misses by cause.
func TestCachePredictionDelta(t *testing.T) {
	before, err := ParseCachePrediction(strings.NewReader(cacheBefore))
	if err != nil {
		t.Fatal(err)
	}
	after, err := ParseCachePrediction(strings.NewReader(strings.NewReplacer(
		`le="0.05"} 3`, `le="0.05"} 12`, `le="+Inf"} 4`, `le="+Inf"} 14`, `_count 4`, `_count 14`,
		`tokens_sum 1000`, `tokens_sum 5000`, `tokens_sum 800`, `tokens_sum 4400`,
		`{result="miss"} 1`, `{result="miss"} 2`, `{result="hit"} 3`, `{result="hit"} 12`,
		`{cause="unknown"} 0`, `{cause="unknown"} 1`,
	).Replace(cacheBefore)))
	if err != nil {
		t.Fatal(err)
	}
	d := CachePredictionDelta(before, after)
	want := &CachePrediction{
		Turns: 10, Within: 9, WithinShare: 0.9, PredictedTokens: 4000, DeliveredTokens: 3600,
		Results: map[string]float64{"hit": 9, "miss": 1}, Misses: map[string]float64{"unknown": 1},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("delta = %+v\nwant    %+v", d, want)
	}
	if d.MissesByCause() != d.Results["miss"] {
		t.Errorf("misses by cause %v, misses %v", d.MissesByCause(), d.Results["miss"])
	}
	if CachePredictionDelta(before, before) != nil {
		t.Error("a delta without turns is not nil")
	}
	if _, err := ParseCachePrediction(strings.NewReader("not metrics {")); err == nil {
		t.Error("garbage parsed")
	}
}

func FuzzParseCachePrediction(f *testing.F) {
	f.Add(cacheBefore)
	f.Add("turnpike_affinity_cache_misses_total{cause=\"x\"} NaN\n")
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseCachePrediction(strings.NewReader(text))
		if err == nil && (c == nil || c.Results == nil || c.Misses == nil) {
			t.Fatalf("parsed without maps: %+v", c)
		}
	})
}
