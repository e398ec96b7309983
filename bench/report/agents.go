package report

import (
	"fmt"
	"io"
	"slices"
)

// agentsTable is the agents workload's phases, each result's beside the
// others' of the same phase.
func agentsTable(results []*Result) *Table {
	t := &Table{Header: []string{"phase", "policy", "agents", "turns", "TTFT p50", "p90", "p99", "floor p50", "p50/floor",
		"out tok/s", "errors (408/429/503/other)", "captured", "gw CPU ms/turn", "gw cores", "peak RSS MB"}}
	phases := 0
	for _, r := range results {
		if r.Agents != nil {
			phases = max(phases, len(r.Agents.Phases))
		}
	}
	for k := range phases {
		for _, r := range results {
			if r.Agents == nil || k >= len(r.Agents.Phases) {
				continue
			}
			p := r.Agents.Phases[k]
			turns := fmt.Sprint(p.Turns)
			if p.Cut > 0 {
				turns += fmt.Sprintf(" (+%d cut)", p.Cut)
			}
			t.Add(fmt.Sprint(k+1), r.Name(), fmt.Sprint(p.Agents), turns,
				Millis(p.TTFTP50Ms), Millis(p.TTFTP90Ms), Millis(p.TTFTP99Ms), Millis(p.FloorP50Ms), times(p.OverFloor),
				fmt.Sprintf("%.0f", p.OutputTokensPerSec),
				fmt.Sprintf("%d (%d/%d/%d/%d)", p.Errors, p.Err408, p.Err429, p.Err503, p.ErrOther),
				pct(p.Captured), fmt.Sprintf("%.2f", p.GatewayCPUPerTurnMs), fmt.Sprintf("%.2f", p.GatewayCores),
				fmt.Sprintf("%.0f", float64(p.PeakRSSBytes)/(1<<20)))
		}
	}
	return t
}

// writeAgents prints the agents workload's phases of results, and each
// result's ratios to baseline's phase by phase; md prints markdown.
func writeAgents(w io.Writer, results []*Result, baseline string, md bool) error {
	if !slices.ContainsFunc(results, func(r *Result) bool { return r.Agents != nil }) {
		return nil
	}
	if md {
		fmt.Fprint(w, "\n### Agents, phase by phase\n\n")
		if err := agentsTable(results).WriteMarkdown(w); err != nil {
			return err
		}
	} else {
		fmt.Fprint(w, "\nagents, phase by phase:\n")
		if err := agentsTable(results).WriteText(w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nTTFT in ms of the turns sent in the phase (cut: still streaming a quarter phase after the run's end, counted in no figure); floor: each turn's prompt less its ideal reuse prefilled at one replica's modelled rate with no queue;"+
		" captured: the usage's cached tokens over the ideal reuse's; gw CPU: the gateway's share of this process's CPU"+
		" (profiled; the bench's goroutines and the simulator's code apart, background GC apportioned) per turn sent, and in cores on the fleet's clock (what it would take at the speed of the hardware modelled); RSS is the whole process's: the gateway's and the recording of the turns, and the agents' and the engines' where they run in it (--agents-process=false, --engines-apart=false).")
	for _, r := range results {
		b := baselineIn(results, baseline, r)
		if r.Agents == nil || b == nil || b == r || b.Agents == nil {
			continue
		}
		for k, p := range r.Agents.Phases {
			if k >= len(b.Agents.Phases) {
				break
			}
			q := b.Agents.Phases[k]
			fmt.Fprintf(w, "%s against %s, phase %d (%d agents): throughput %s, TTFT p50 %s, p99 %s; errors %d against %d\n",
				r.Name(), baseline, k+1, p.Agents, times(ratio(p.OutputTokensPerSec, q.OutputTokensPerSec)),
				times(ratio(p.TTFTP50Ms, q.TTFTP50Ms)), times(ratio(p.TTFTP99Ms, q.TTFTP99Ms)), p.Errors, q.Errors)
		}
	}
	for _, r := range results {
		if r.Agents != nil && r.Agents.CPUError != "" {
			fmt.Fprintf(w, "%s: no CPU profile: %s\n", r.Name(), r.Agents.CPUError)
		}
	}
	return nil
}
