package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/turnpike-gateway/turnpike/bench/driver"
)

// Name labels a result in tables and plots.
func (r *Result) Name() string {
	switch {
	case r.Policy != "" && r.Run > 0:
		return fmt.Sprintf("%s #%d", r.Policy, r.Run)
	case r.Policy != "":
		return r.Policy
	}
	return r.Workload
}

// summaryTable puts one row per result: latencies in ms, rates, cache.
func summaryTable(results []*Result) *Table {
	t := &Table{Header: []string{
		"policy", "requests", "errors", "shed",
		"TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p99", "E2E p50", "E2E p99",
		"out tok/s", "req/s", "engine hit", "cached (usage)", "ideal hit", "captured", "load spread", "engine TTFT p50", "engine ITL p50", "engine ITL p99",
		"idle-while-queued s", "max gw queue",
	}}
	for _, r := range results {
		s := r.Total
		hit, ideal, captured, spread, eTTFT50, eITL50, eITL99 := "-", "-", "-", "-", "-", "-", "-"
		idle, queue := "-", "-"
		if o := r.Occupancy; o != nil {
			idle, queue = fmt.Sprint(o.IdleWhileQueuedSeconds), fmt.Sprintf("%.0f", o.MaxGatewayQueued)
		}
		if r.Engines != nil && r.Engines.ITLP99Ms > 0 {
			eITL50, eITL99 = Millis(r.Engines.ITLP50Ms), Millis(r.Engines.ITLP99Ms)
		}
		if r.Engines != nil && r.Engines.TTFTP50Ms > 0 {
			eTTFT50 = Millis(r.Engines.TTFTP50Ms)
		}
		if r.Engines != nil && r.Engines.Flavor != "" {
			hit = pct(r.Engines.HitRate)
		}
		if r.Engines != nil && r.Engines.LoadSpread > 0 {
			spread = fmt.Sprintf("%.2f", r.Engines.LoadSpread)
		}
		if r.Ideal != nil && r.Ideal.PromptTokens > 0 {
			ideal = pct(r.Ideal.HitRate)
			if r.Ideal.CapturedShare > 0 {
				captured = pct(r.Ideal.CapturedShare)
			}
		}
		t.Add(r.Name(), fmt.Sprint(s.Requests), fmt.Sprint(s.Errors), fmt.Sprint(s.Shed),
			Millis(s.TTFT.P50Ms), Millis(s.TTFT.P90Ms), Millis(s.TTFT.P99Ms), Millis(s.ITL.P50Ms), Millis(s.ITL.P99Ms),
			Millis(s.E2E.P50Ms), Millis(s.E2E.P99Ms),
			fmt.Sprintf("%.1f", s.OutputTokensPerSec), fmt.Sprintf("%.2f", s.RequestsPerSec),
			hit, pct(s.CachedTokenShare), ideal, captured, spread, eTTFT50, eITL50, eITL99, idle, queue)
	}
	return t
}

// breakdownTable splits one result by tenant and band.
func breakdownTable(r *Result) *Table {
	t := &Table{Header: []string{"group", "requests", "errors", "shed", "TTFT p50", "TTFT p99", "E2E p99", "out tok/s"}}
	add := func(prefix string, m map[string]*driver.Summary) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			s := m[k]
			t.Add(prefix+k, fmt.Sprint(s.Requests), fmt.Sprint(s.Errors), fmt.Sprint(s.Shed),
				Millis(s.TTFT.P50Ms), Millis(s.TTFT.P99Ms), Millis(s.E2E.P99Ms), fmt.Sprintf("%.1f", s.OutputTokensPerSec))
		}
	}
	add("tenant ", r.ByTenant)
	add("band ", r.ByBand)
	return t
}

func ratioTable(c *Comparison) *Table {
	t := &Table{Header: []string{"policy", "TTFT p50 reduction", "TTFT p99 reduction", "ITL p99 lower", "engine ITL p99 lower", "engine TTFT p50 lower", "throughput", "engine hit rate", "cached share"}}
	for _, q := range c.Ratios {
		t.Add(q.Policy, signedPct(q.TTFTP50ReductionPct), signedPct(q.TTFTP99ReductionPct), times(q.ITLP99LowerX), times(q.EngineITLP99LowerX), times(q.EngineTTFTP50LowerX),
			times(q.ThroughputX), times(q.HitRateX), times(q.CachedShareX))
	}
	return t
}

// medianTable puts one row per policy of a repeated comparison: each
// figure's median over its runs, then how many of its runs were at least
// as good as the baseline's, figure by figure.
func medianTable(c *Comparison) *Table {
	header := []string{"policy", "runs", "TTFT p50", "TTFT p90", "TTFT p99", "out tok/s", "errors", "idle-while-queued s"}
	for _, f := range medianFigures {
		header = append(header, "≥ "+f.label)
	}
	t := &Table{Header: header}
	for _, m := range c.Medians {
		idle := "-"
		if m.IdleWhileQueuedSeconds >= 0 {
			idle = fmt.Sprintf("%.1f", m.IdleWhileQueuedSeconds)
		}
		row := []string{m.Policy, fmt.Sprint(m.Runs), Millis(m.TTFTP50Ms), Millis(m.TTFTP90Ms), Millis(m.TTFTP99Ms),
			fmt.Sprintf("%.1f", m.OutputTokensPerSec), fmt.Sprintf("%.1f", m.Errors), idle}
		for _, f := range medianFigures {
			if m.Policy == c.Baseline || m.Compared[f.name] == 0 {
				row = append(row, "-")
				continue
			}
			row = append(row, fmt.Sprintf("%d/%d", m.AtLeastAsGood[f.name], m.Compared[f.name]))
		}
		t.Add(row...)
	}
	return t
}

// failuresText lists errors by class, sheds by band and reason, and the
// requests the bench cut.
func failuresText(s driver.Summary) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.ErrorsByClass)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, s.ErrorsByClass[k]))
	}
	for _, band := range slices.Sorted(maps.Keys(s.Sheds)) {
		for _, reason := range slices.Sorted(maps.Keys(s.Sheds[band])) {
			parts = append(parts, fmt.Sprintf("shed[%s/%s]=%d", band, reason, s.Sheds[band][reason]))
		}
	}
	if s.Cut > 0 {
		parts = append(parts, fmt.Sprintf("cut by the bench (no error)=%d", s.Cut))
	}
	return strings.Join(parts, " ")
}

// WriteText prints results as terminal tables: the summary (latencies in
// ms), each result's split by tenant and band, failures, and the isolation
// verdict where there is one.
func WriteText(w io.Writer, results ...*Result) error {
	return writeReport(w, results, false)
}

// WriteMarkdown prints the same as WriteText as markdown, for docs.
func WriteMarkdown(w io.Writer, results ...*Result) error {
	return writeReport(w, results, true)
}

func writeReport(w io.Writer, results []*Result, md bool) error {
	write := func(t *Table) error {
		if md {
			return t.WriteMarkdown(w)
		}
		return t.WriteText(w)
	}
	heading := func(s string) {
		if md {
			fmt.Fprintf(w, "\n### %s\n\n", s)
		} else {
			fmt.Fprintf(w, "\n%s\n", s)
		}
	}
	if err := write(summaryTable(results)); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nLatencies in ms; engine hit from the engines' /metrics, cached from usage;"+
		" ideal hit is what an ideal router could reuse, captured the engine hit over it;"+
		" load spread is the busiest engine's tokens over the mean;"+
		" idle-while-queued counts the seconds the gateway queued turns while an engine had room"+
		" (nothing waiting, fewer running than its max_num_seqs and KV cache under 90%,"+
		" counting the requests the gateway has sent it that it does not show yet).")
	if err := writeCost(w, results, nil, md); err != nil {
		return err
	}
	writeInterference(w, results)
	writeBatchLoad(w, results)
	for _, r := range results {
		heading(fmt.Sprintf("%s: %s workload, %s API, %.1fs", r.Name(), r.Workload, r.API, r.DurationSeconds))
		if err := write(breakdownTable(r)); err != nil {
			return err
		}
		if f := failuresText(r.Total); f != "" {
			fmt.Fprintf(w, "\nfailures: %s\n", f)
		}
		if r.Engines != nil && len(r.Engines.Errors) > 0 {
			fmt.Fprintf(w, "\nengine scrape errors: %s\n", strings.Join(r.Engines.Errors, "; "))
		}
		writeCachePrediction(w, "", r.CachePrediction)
		writeIsolation(w, r, "")
		if r.Overload != nil {
			writeOverload(w, r.Overload)
		}
		if r.Lending != nil {
			writeLending(w, r.Lending)
		}
		if r.LoRA != nil {
			writeLoRA(w, r.LoRA)
		}
		if err := writeAgents(w, []*Result{r}, "", md); err != nil {
			return err
		}
		if r.Chaos != nil {
			for _, t := range chaosTables(r.Chaos) {
				heading(t.title)
				if err := write(t.Table); err != nil {
					return err
				}
			}
			if errs := r.Chaos.GatewayErrors; len(errs) > 0 {
				fmt.Fprintf(w, "\ngateway scrape errors: %s\n", strings.Join(errs, "; "))
			}
		}
	}
	return nil
}

// WriteText prints the comparison: every policy's figures, then the ratios
// to the baseline.
func (c *Comparison) WriteText(w io.Writer) error {
	if err := summaryTable(c.Results).WriteText(w); err != nil {
		return err
	}
	writeInterference(w, c.Results)
	writeBatchLoad(w, c.Results)
	fmt.Fprintf(w, "\nagainst %s:\n", c.Baseline)
	if err := ratioTable(c).WriteText(w); err != nil {
		return err
	}
	if c.Repeat > 1 {
		fmt.Fprintf(w, "\nmedian of %d runs each, the policies' order reversed every other run; runs at least as good as %s's of the same repetition (≥):\n", c.Repeat, c.Baseline)
		if err := medianTable(c).WriteText(w); err != nil {
			return err
		}
	}
	for _, r := range c.Results {
		writeIsolation(w, r, r.Name())
	}
	writeLoRAs(w, c.Results, c.Baseline)
	if err := writeAgents(w, c.Results, c.Baseline, false); err != nil {
		return err
	}
	writeCachePredictions(w, c.Results)
	return writeCost(w, c.Results, c, false)
}

// WriteMarkdown prints the comparison as markdown tables, for docs.
func (c *Comparison) WriteMarkdown(w io.Writer) error {
	if err := summaryTable(c.Results).WriteMarkdown(w); err != nil {
		return err
	}
	writeInterference(w, c.Results)
	writeBatchLoad(w, c.Results)
	fmt.Fprintf(w, "\nAgainst %s:\n\n", c.Baseline)
	if err := ratioTable(c).WriteMarkdown(w); err != nil {
		return err
	}
	if c.Repeat > 1 {
		fmt.Fprintf(w, "\nMedian of %d runs each, the policies' order reversed every other run; runs at least as good as %s's of the same repetition (≥):\n\n", c.Repeat, c.Baseline)
		if err := medianTable(c).WriteMarkdown(w); err != nil {
			return err
		}
	}
	writeLoRAs(w, c.Results, c.Baseline)
	if err := writeAgents(w, c.Results, c.Baseline, true); err != nil {
		return err
	}
	writeCachePredictions(w, c.Results)
	return writeCost(w, c.Results, c, true)
}
