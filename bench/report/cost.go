package report

import (
	"fmt"
	"io"
	"math"

	"github.com/turnpike-gateway/turnpike/bench/driver"
)

// costTables are the cost figures of results: each run's pools and
// overall, and, in a comparison, each run's saving against the baseline.
func costTables(results []*Result, cmp *Comparison) []titledTable {
	var out []titledTable
	for _, r := range results {
		c := r.Cost
		if c == nil {
			continue
		}
		t := &Table{Header: []string{"pool", "chips", "$/chip-h", "input tok", "cached", "output tok", "$", "$/Mtok in", "$/Mtok out", "$/Mtok", "busy", "busy $/Mtok"}}
		for _, p := range append(append([]driver.PoolCost(nil), c.Pools...), c.Overall) {
			price := "-"
			if p.DollarsPerHour > 0 {
				price = fmt.Sprintf("%.2f", p.DollarsPerHour)
			}
			t.Add(p.Pool, fmt.Sprint(p.Chips), price, fmt.Sprintf("%.0f", p.InputTokens), fmt.Sprintf("%.0f", p.CachedInputTokens),
				fmt.Sprintf("%.0f", p.OutputTokens), fmt.Sprintf("%.4f", p.Dollars), dollars(p.InputPerMtok), dollars(p.OutputPerMtok),
				dollars(p.PerMtok), pct(p.BusyShare), dollars(p.BusyPerMtok))
		}
		title := fmt.Sprintf("%s: cost over %.0f s of hardware time", r.Name(), c.HardwareSeconds)
		if c.TTFTTargetMs > 0 {
			title += fmt.Sprintf("; SLO attainment %s (TTFT ≤ %s ms)", pct(c.SLOAttainment), Millis(c.TTFTTargetMs))
		}
		out = append(out, titledTable{title: title, Table: t})
	}
	if cmp == nil {
		return out
	}
	t := &Table{Header: []string{"policy", "$/Mtok", "saving", "busy $/Mtok", "busy saving", "SLO attainment"}}
	for _, r := range results {
		base := baselineIn(results, cmp.Baseline, r)
		if r.Cost == nil || base == nil || base.Cost == nil {
			continue
		}
		o, b := r.Cost.Overall, base.Cost.Overall
		t.Add(r.Name(), dollars(o.PerMtok), signedPct(reduction(b.PerMtok, o.PerMtok)),
			dollars(o.BusyPerMtok), signedPct(reduction(b.BusyPerMtok, o.BusyPerMtok)), pct(r.Cost.SLOAttainment))
	}
	if len(t.Rows) == 0 {
		return out
	}
	return append(out, titledTable{title: "cost against " + cmp.Baseline, Table: t})
}

// dollars prints a price per million tokens.
func dollars(v float64) string {
	switch {
	case v == 0 || math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// writeCost prints costTables, each under its heading, as text or
// markdown.
func writeCost(w io.Writer, results []*Result, cmp *Comparison, md bool) error {
	for _, t := range costTables(results, cmp) {
		var err error
		if md {
			fmt.Fprintf(w, "\n### %s\n\n", t.title)
			err = t.Table.WriteMarkdown(w)
		} else {
			fmt.Fprintf(w, "\n%s\n", t.title)
			err = t.Table.WriteText(w)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
