package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// palette colours series in order; chosen to stay apart for common colour
// blindness.
var palette = []string{"#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"}

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
