package report

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
)

// WriteHTML writes a self-contained HTML report of results: summary tables
// and inline SVG plots (latency CDFs per result, throughput over time). It
// needs no server and loads nothing from elsewhere.
func WriteHTML(w io.Writer, results ...*Result) error {
	return writeHTML(w, "turnpike bench", results, nil)
}

// WriteHTML writes the comparison's HTML report: every policy's figures,
// the ratios to the baseline, and the plots with one line per policy.
func (c *Comparison) WriteHTML(w io.Writer) error {
	return writeHTML(w, "turnpike bench: policies compared", c.Results, c)
}

const htmlStyle = `body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}th:first-child,td:first-child{text-align:left}
th{background:#f3f3f3}.plots{display:flex;flex-wrap:wrap;gap:1em}
svg{background:#fff;border:1px solid #ddd}svg text{font:11px system-ui,sans-serif;fill:#333}
.note{color:#666;font-size:.9em}`

func writeHTML(w io.Writer, title string, results []*Result, cmp *Comparison) error {
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>%s</title><style>%s</style></head><body>\n", esc(title), htmlStyle)
	fmt.Fprintf(&b, "<h1>%s</h1>\n<p class=\"note\">Generated %s. Latencies in milliseconds. TTFT: request sent → first content delta; ITL: gap between content deltas; E2E: request sent → stream end. Engine hit: prefix-cache hit tokens ÷ queried tokens from the engines' /metrics; cached (usage): cached ÷ input tokens as the gateway reported them.</p>\n",
		esc(title), esc(time.Now().UTC().Format(time.RFC3339)))

	b.WriteString("<h2>Summary</h2>\n")
	htmlTable(&b, summaryTable(results))
	if cmp != nil {
		fmt.Fprintf(&b, "<h2>Against %s</h2>\n", esc(cmp.Baseline))
		htmlTable(&b, ratioTable(cmp))
	}

	for _, r := range results {
		if r.Chaos == nil {
			continue
		}
		for _, t := range chaosTables(r.Chaos) {
			fmt.Fprintf(&b, "<h2>%s</h2>\n", esc(t.title))
			htmlTable(&b, t.Table)
		}
	}

	for _, t := range costTables(results, cmp) {
		fmt.Fprintf(&b, "<h2>%s</h2>\n", esc(t.title))
		htmlTable(&b, t.Table)
	}

	plotted := results
	for _, r := range results {
		if r.Isolation != nil && r.Isolation.Baseline != nil {
			iso := r.Isolation
			b.WriteString("<h2>Isolation</h2>\n")
			fmt.Fprintf(&b, "<p>Tenant A's interactive p99 TTFT from %.1fs on: <b>%s ms</b> alone, <b>%s ms</b> while tenant B ran %d agent loops (%s). A shed %d, B shed %d.</p>\n",
				iso.WindowStartSeconds, Millis(iso.BaselineAP99TTFTMs), Millis(iso.BurstAP99TTFTMs), iso.BLoops, esc(times(iso.P99TTFTRatio)), iso.BurstA.Shed, iso.BurstB.Shed)
			if f := failuresText(driver.Summary{Sheds: iso.Sheds}); f != "" {
				fmt.Fprintf(&b, "<p>Sheds in the burst: %s</p>\n", esc(f))
			}
			base := ResultOf(iso.Baseline)
			base.Policy = r.Name() + " A alone"
			// The run holds A's stretches alone and both tenants' under
			// the burst.
			whole := *r
			whole.Policy = r.Name() + " whole run"
			plotted = []*Result{base, &whole}
		}
	}

	b.WriteString("<h2>Latency</h2>\n<div class=\"plots\">\n")
	cdfPlot := func(name string, pick func(driver.CDF) []float64) {
		var ss []series
		for _, r := range plotted {
			v := pick(r.CDF)
			if len(v) == 0 {
				continue
			}
			y := make([]float64, len(r.CDF.Percentiles))
			for i, p := range r.CDF.Percentiles {
				y[i] = p / 100
			}
			ss = append(ss, series{name: r.Name(), x: v, y: y})
		}
		b.WriteString(lineChart(name+" CDF", name+" (ms, log scale)", "cumulative share", ss, true))
	}
	cdfPlot("TTFT", func(c driver.CDF) []float64 { return c.TTFTMs })
	cdfPlot("ITL", func(c driver.CDF) []float64 { return c.ITLMs })
	cdfPlot("E2E", func(c driver.CDF) []float64 { return c.E2EMs })
	b.WriteString("</div>\n<h2>Throughput over time</h2>\n<div class=\"plots\">\n")
	var tput []series
	for _, r := range plotted {
		tl := r.Timeline
		x := make([]float64, len(tl.OutputTokensPerSec))
		for i := range x {
			x[i] = float64(i) * tl.BucketSeconds
		}
		tput = append(tput, series{name: r.Name(), x: x, y: tl.OutputTokensPerSec})
	}
	b.WriteString(lineChart("Output tokens per second", "time (s)", "tokens/s", tput, false))
	b.WriteString("</div>\n")

	for _, r := range results {
		fmt.Fprintf(&b, "<h2>%s by tenant and band</h2>\n", esc(r.Name()))
		htmlTable(&b, breakdownTable(r))
		if f := failuresText(r.Total); f != "" {
			fmt.Fprintf(&b, "<p>Failures: %s</p>\n", esc(f))
		}
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func htmlTable(b *strings.Builder, t *Table) {
	b.WriteString("<table><thead><tr>")
	for _, h := range t.Header {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(h))
	}
	b.WriteString("</tr></thead><tbody>\n")
	for _, r := range t.Rows {
		b.WriteString("<tr>")
		for _, c := range r {
			fmt.Fprintf(b, "<td>%s</td>", html.EscapeString(c))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</tbody></table>\n")
}
