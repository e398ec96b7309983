package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/turnpike-gateway/turnpike/bench/scrape"
)

// writeCachePrediction prints the gateway's predicted cached tokens
// against the engines' (docs/cache.md), if the run has them; name, if
// not "", says whose.
func writeCachePrediction(w io.Writer, name string, c *scrape.CachePrediction) {
	if c == nil {
		return
	}
	if name != "" {
		name += ": "
	}
	fmt.Fprintf(w, "\n%scache prediction: %.0f turns, %s within %g%% of their prompt's tokens; predicted %.0f cached tokens, engines reported %.0f\n",
		name, c.Turns, pct(c.WithinShare), scrape.WithinShare*100, c.PredictedTokens, c.DeliveredTokens)
	fmt.Fprintf(w, "  by result: %s; misses by cause: %s (sum %.0f)\n",
		counts(c.Results), counts(c.Misses), c.MissesByCause())
}

// counts is "k=v, …" in key order, or "none".
func counts(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%.0f", k, m[k]))
	}
	return strings.Join(out, ", ")
}

// writeCachePredictions is writeCachePrediction for each result.
func writeCachePredictions(w io.Writer, results []*Result) {
	for _, r := range results {
		writeCachePrediction(w, r.Name(), r.CachePrediction)
	}
}
