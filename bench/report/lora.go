package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/turnpike-gateway/turnpike/bench/scenario/lora"
)

// writeLoRA prints the lora workload's adapter figures.
func writeLoRA(w io.Writer, rep *lora.Report) {
	fmt.Fprintf(w, "\nlora: %d adapters (%d sessions on the most popular); %d requests, %.0f adapter loads (%.1f per 1,000 requests), %.0f requests waited on a load; TTFT p50 %s ms, p90 %s ms\n",
		rep.Adapters, rep.TopAdapterSession, rep.Requests, rep.Loads, rep.LoadsPer1000, rep.WaitedOnLoad, Millis(rep.TTFTP50Ms), Millis(rep.TTFTP90Ms))
	if len(rep.ScrapeErrors) > 0 {
		fmt.Fprintf(w, "  engine scrape errors (loads undercounted): %s\n", strings.Join(rep.ScrapeErrors, "; "))
	}
}

// writeLoRAs prints each compared result's adapter figures and, for the
// others, how they stand against baseline's of the same run.
func writeLoRAs(w io.Writer, results []*Result, baseline string) {
	for _, r := range results {
		if r.LoRA == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s:", r.Name())
		writeLoRA(w, r.LoRA)
		b := baselineIn(results, baseline, r)
		if b == nil || b == r || b.LoRA == nil {
			continue
		}
		fmt.Fprintf(w, "  against %s: adapter loads per 1,000 requests %s fewer, TTFT p50 %s\n",
			baseline, times(ratio(b.LoRA.LoadsPer1000, r.LoRA.LoadsPer1000)), times(ratio(r.LoRA.TTFTP50Ms, b.LoRA.TTFTP50Ms)))
	}
}
