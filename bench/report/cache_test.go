package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench/scrape"
)

// TestCachePredictionText: the report says how many turns were predicted
// within 5% and what the misses were, by cause, with their sum.
func TestCachePredictionText(t *testing.T) {
	r := &Result{Policy: "cache-aware", Workload: "agentic", CachePrediction: &scrape.CachePrediction{
		Turns: 10, Within: 9, WithinShare: 0.9, PredictedTokens: 4000, DeliveredTokens: 3600,
		Results: map[string]float64{"hit": 8, "miss": 2}, Misses: map[string]float64{"evicted": 1, "never_there": 1},
	}}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"run": func(b *bytes.Buffer) error { return WriteText(b, r) },
		"comparison": func(b *bytes.Buffer) error {
			return (&Comparison{Baseline: "cache-aware", Results: []*Result{r}}).WriteText(b)
		},
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"cache prediction: 10 turns, 90.0% within 5% of their prompt's tokens; predicted 4000 cached tokens, engines reported 3600",
			"by result: hit=8, miss=2; misses by cause: evicted=1, never_there=1 (sum 2)",
		} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s: report lacks %q:\n%s", name, want, b.String())
			}
		}
	}
}
