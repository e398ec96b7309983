package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
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

// palette colours series in order; chosen to stay apart for common colour
// blindness.
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"}

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
			htmlTable(&b, t.table)
		}
	}

	for _, t := range costTables(results, cmp) {
		fmt.Fprintf(&b, "<h2>%s</h2>\n", esc(t.title))
		htmlTable(&b, t.table)
	}

	plotted := results
	for _, r := range results {
		if r.Isolation != nil && r.Isolation.Baseline != nil {
			iso := r.Isolation
			b.WriteString("<h2>Isolation</h2>\n")
			fmt.Fprintf(&b, "<p>Tenant A's interactive p99 TTFT from %.1fs on: <b>%s ms</b> alone, <b>%s ms</b> while tenant B ran %d agent loops (%s). A shed %d, B shed %d.</p>\n",
				iso.WindowStartSeconds, ms(iso.BaselineAP99TTFTMs), ms(iso.BurstAP99TTFTMs), iso.BLoops, esc(times(iso.P99TTFTRatio)), iso.BurstA.Shed, iso.BurstB.Shed)
			if f := failuresText(Summary{Sheds: iso.Sheds}); f != "" {
				fmt.Fprintf(&b, "<p>Sheds in the burst: %s</p>\n", esc(f))
			}
			base := *iso.Baseline
			base.Policy = r.name() + " A alone"
			// The run holds A's stretches alone and both tenants' under
			// the burst.
			whole := *r
			whole.Policy = r.name() + " whole run"
			plotted = []*Result{&base, &whole}
		}
	}

	b.WriteString("<h2>Latency</h2>\n<div class=\"plots\">\n")
	cdfPlot := func(name string, pick func(CDF) []float64) {
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
			ss = append(ss, series{name: r.name(), x: v, y: y})
		}
		b.WriteString(lineChart(name+" CDF", name+" (ms, log scale)", "cumulative share", ss, true))
	}
	cdfPlot("TTFT", func(c CDF) []float64 { return c.TTFTMs })
	cdfPlot("ITL", func(c CDF) []float64 { return c.ITLMs })
	cdfPlot("E2E", func(c CDF) []float64 { return c.E2EMs })
	b.WriteString("</div>\n<h2>Throughput over time</h2>\n<div class=\"plots\">\n")
	var tput []series
	for _, r := range plotted {
		tl := r.Timeline
		x := make([]float64, len(tl.OutputTokensPerSec))
		for i := range x {
			x[i] = float64(i) * tl.BucketSeconds
		}
		tput = append(tput, series{name: r.name(), x: x, y: tl.OutputTokensPerSec})
	}
	b.WriteString(lineChart("Output tokens per second", "time (s)", "tokens/s", tput, false))
	b.WriteString("</div>\n")

	for _, r := range results {
		fmt.Fprintf(&b, "<h2>%s by tenant and band</h2>\n", esc(r.name()))
		htmlTable(&b, breakdownTable(r))
		if f := failuresText(r.Total); f != "" {
			fmt.Fprintf(&b, "<p>Failures: %s</p>\n", esc(f))
		}
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func htmlTable(b *strings.Builder, t *table) {
	b.WriteString("<table><thead><tr>")
	for _, h := range t.header {
		fmt.Fprintf(b, "<th>%s</th>", html.EscapeString(h))
	}
	b.WriteString("</tr></thead><tbody>\n")
	for _, r := range t.rows {
		b.WriteString("<tr>")
		for _, c := range r {
			fmt.Fprintf(b, "<td>%s</td>", html.EscapeString(c))
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</tbody></table>\n")
}

// series is one line of a chart.
type series struct {
	name string
	x, y []float64
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 520, 300
	padL, padR     = 60, 20
	padT, padB     = 30, 70
)

// lineChart renders series as an SVG line chart with axes, ticks and a
// legend. With logX, x is plotted on a log10 scale (values <= 0 dropped).
func lineChart(title, xlabel, ylabel string, ss []series, logX bool) string {
	esc := html.EscapeString
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		chartW, chartH, chartW, chartH, esc(title))
	fmt.Fprintf(&b, `<text x="%d" y="18" font-weight="bold">%s</text>`, padL, esc(title))

	tx := func(v float64) float64 { return v }
	if logX {
		tx = math.Log10
	}
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	for _, s := range ss {
		for i := range min(len(s.x), len(s.y)) {
			if logX && s.x[i] <= 0 {
				continue
			}
			xmin, xmax = math.Min(xmin, tx(s.x[i])), math.Max(xmax, tx(s.x[i]))
			ymax = math.Max(ymax, s.y[i])
		}
	}
	if math.IsInf(xmin, 0) {
		fmt.Fprintf(&b, `<text x="%d" y="%d">no data</text></svg>`, padL, chartH/2)
		return b.String()
	}
	if logX {
		xmin, xmax = math.Floor(xmin), math.Ceil(xmax)
	}
	if xmax <= xmin {
		xmax = xmin + 1
	}
	if ymax <= ymin {
		ymax = ymin + 1
	}
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	px := func(v float64) float64 { return padL + (tx(v)-xmin)/(xmax-xmin)*plotW }
	py := func(v float64) float64 { return padT + plotH - (v-ymin)/(ymax-ymin)*plotH }

	// Axes and ticks.
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`, padL, padT, plotW, plotH)
	var xticks []float64
	if logX {
		for e := xmin; e <= xmax; e++ {
			xticks = append(xticks, math.Pow(10, e))
		}
	} else {
		xticks = niceTicks(xmin, xmax)
	}
	for _, v := range xticks {
		x := px(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.0f" stroke="#eee"/>`, x, padT, x, padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`, x, padT+plotH+14, tickLabel(v))
	}
	for _, v := range niceTicks(ymin, ymax) {
		y := py(v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/>`, padL, y, padL+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-4, y+4, tickLabel(v))
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`, padL+plotW/2, padT+plotH+30, esc(xlabel))
	fmt.Fprintf(&b, `<text transform="translate(14 %.0f) rotate(-90)" text-anchor="middle">%s</text>`, padT+plotH/2, esc(ylabel))

	// Lines, then the legend under the x label.
	for i, s := range ss {
		color := palette[i%len(palette)]
		var pts strings.Builder
		for j := range min(len(s.x), len(s.y)) {
			if logX && s.x[j] <= 0 {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s.x[j]), py(s.y[j]))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"><title>%s</title></polyline>`,
			color, strings.TrimSpace(pts.String()), esc(s.name))
		lx := float64(padL + (i%3)*150)
		ly := padT + plotH + 46 + float64(i/3)*14
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="4" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`,
			lx, ly-4, color, lx+16, ly, esc(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceTicks returns about five round tick values covering [lo, hi].
func niceTicks(lo, hi float64) []float64 {
	span := hi - lo
	if !(span > 0) || math.IsInf(span, 0) {
		return []float64{lo}
	}
	step := math.Pow(10, math.Floor(math.Log10(span/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if span/(step*m) <= 6 {
			step *= m
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9 && len(out) < 20; v += step {
		out = append(out, v)
	}
	return out
}

func tickLabel(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}
