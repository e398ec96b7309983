package report

import (
	"fmt"
	"io"
)

// writeInterference says, for each result that had an interfering client,
// what it sent.
func writeInterference(w io.Writer, results []*Result) {
	for _, r := range results {
		rep := r.Interference
		if rep == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s: interfering client sent %d requests straight to %d engine(s) (%d failed, %d skipped at its in-flight cap), %d prompt tokens, %d found cached; left out of the engine hit rate\n",
			r.Name(), rep.Requests, len(rep.Engines), rep.Errors, rep.Skipped, rep.PromptTokens, rep.CachedTokens)
		if rep.FirstError != "" {
			fmt.Fprintf(w, "  first failure: %s\n", rep.FirstError)
		}
	}
}

// writeBatchLoad says, for each result that had a batch beside it, what
// became of the batch.
func writeBatchLoad(w io.Writer, results []*Result) {
	for _, r := range results {
		rep := r.BatchLoad
		if rep == nil {
			continue
		}
		if rep.ID == "" {
			fmt.Fprintf(w, "\n%s: batch not submitted: %s\n", r.Name(), rep.Error)
			continue
		}
		verdict := "all completed within the deadline"
		if !rep.InDeadline {
			verdict = "NOT all completed within the deadline"
		}
		fmt.Fprintf(w, "\n%s: batch %s of %d lines beside the run: %s, %d completed, %d failed, in %.1f s (the run's own load ended %.1f s after it was submitted): %s\n",
			r.Name(), rep.ID, rep.Lines, rep.Status, rep.Completed, rep.Failed, rep.Seconds, rep.RunSeconds, verdict)
		if rep.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", rep.Error)
		}
	}
}
