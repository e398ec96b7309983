package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scenario/lending"
	"github.com/turnpike-gateway/turnpike/bench/scenario/overload"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// writeOverload prints the report's bands, most urgent first.
func writeOverload(w io.Writer, rep *overload.Report) {
	fmt.Fprintf(w, "\noverload: %.1f requests/s offered; idle-while-queued %d s, max gateway queue %.0f; interactive TTFT alone p50 %s ms, p99 %s ms: p99 under overload %s\n",
		rep.OfferedPerSecond, rep.IdleWhileQueuedSeconds, rep.MaxGatewayQueued,
		Millis(rep.BaselineInteractiveP50Ms), Millis(rep.BaselineInteractiveP99Ms), times(rep.InteractiveP99Ratio))
	for _, name := range []string{workload.BandInteractive, workload.BandStandard, workload.BandBackground} {
		b := rep.Bands[name]
		if b == nil {
			continue
		}
		reasons := make([]string, 0, len(b.Reasons))
		for r, n := range b.Reasons {
			reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
		}
		sort.Strings(reasons)
		fmt.Fprintf(w, "  %-11s offered %4d  completed %4d  shed %4d (Retry-After %d%s)  errors %d  TTFT p50 %s ms  p99 %s ms\n",
			name, b.Offered, b.Completed, b.Shed, b.ShedWithRetryAfter, reasonList(reasons), b.Errors, Millis(b.TTFTP50Ms), Millis(b.TTFTP99Ms))
	}
}

func reasonList(rs []string) string {
	if len(rs) == 0 {
		return ""
	}
	return "; " + strings.Join(rs, ", ")
}

// writeLending prints the report's verdict.
func writeLending(w io.Writer, rep *lending.Report) {
	fmt.Fprintf(w, "\nlending: pool %s (%d engines), trainer busy %.0f%% of %gs cycles, %d cycles per run, reclaim deadline %gs, %d background responses in flight\n",
		rep.Pool, rep.Engines, 100*rep.TrainerDuty, rep.CycleSeconds, rep.Cycles, rep.ReclaimDeadlineSeconds, rep.AsyncJobs)
	for _, run := range []lending.Figures{rep.Alone, rep.Lent} {
		name := "trainer alone"
		if run.Lending {
			name = "with lending "
		}
		fmt.Fprintf(w, "  %s: duty cycle %.1f%% (trainer %.1f%%, lent work %.1f%%, %d samples); background responses %d completed (%d output tokens), %d failed, %d unfinished\n",
			name, 100*run.DutyCycle, 100*run.TrainerShare, 100*run.LentShare, run.Samples, run.AsyncCompleted, run.AsyncOutputTokens, run.AsyncFailed, run.AsyncUnfinished)
		if run.Lending {
			fmt.Fprintf(w, "    lent requests cut at a reclaim's deadline: %d\n", run.CancelledByReclaim)
		}
		for e, n := range run.AsyncErrors {
			fmt.Fprintf(w, "    failed %d× %s\n", n, e)
		}
		for _, c := range run.Reclaims {
			verdict := "freed within its deadline"
			switch {
			case c.FreedAfterSeconds < 0:
				verdict = "NOT freed before the trainer's next phase"
			case !c.WithinDeadline:
				verdict = "freed LATE"
			}
			fmt.Fprintf(w, "    reclaim %d at %.1fs: %d lent requests in flight, pool free after %.2fs of %gs: %s\n",
				c.Cycle, c.AtSeconds, c.InFlight, c.FreedAfterSeconds, c.DeadlineSeconds, verdict)
		}
		for _, e := range run.AdminErrors {
			fmt.Fprintf(w, "    admin error: %s\n", e)
		}
	}
}

// writeIsolation prints the isolation scenario's verdict of r, if it has
// one: A's p99 alone and under the burst, by round, and the sheds; label,
// when not empty, names the run first.
func writeIsolation(w io.Writer, r *Result, label string) {
	iso := r.Isolation
	if iso == nil {
		return
	}
	if label != "" {
		label += " "
	}
	fmt.Fprintf(w, "\n%sisolation: tenant A p99 TTFT %s ms alone, %s ms under B's burst (%d loops) = %s; A shed %d, B shed %d\n",
		label, Millis(iso.BaselineAP99TTFTMs), Millis(iso.BurstAP99TTFTMs), iso.BLoops, times(iso.P99TTFTRatio), iso.BurstA.Shed, iso.BurstB.Shed)
	if len(iso.Rounds) > 1 {
		p99s, turns, drains := make([]string, len(iso.Rounds)), make([]string, len(iso.Rounds)), make([]string, len(iso.Rounds))
		for i, rd := range iso.Rounds {
			p99s[i] = fmt.Sprintf("%s/%s", Millis(rd.AloneP99TTFTMs), Millis(rd.BurstP99TTFTMs))
			turns[i] = fmt.Sprintf("%d/%d", rd.AloneTurns, rd.BurstTurns)
			drains[i] = fmt.Sprintf("%.1f", rd.BDrainSeconds)
		}
		fmt.Fprintf(w, "A's p99 TTFT by round, alone/under the burst (ms): %s\n", strings.Join(p99s, ", "))
		fmt.Fprintf(w, "A's turns by round, alone/under the burst: %s; B's last requests ended %s s after each burst\n", strings.Join(turns, ", "), strings.Join(drains, ", "))
	}
	if f := failuresText(driver.Summary{Sheds: iso.Sheds}); f != "" {
		fmt.Fprintf(w, "sheds in the burst: %s\n", f)
	}
}
