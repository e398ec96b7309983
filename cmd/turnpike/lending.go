package main

import (
	"flag"
	"time"

	"github.com/turnpike-gateway/turnpike/bench"
)

// lendingMaxNumSeqs is the lending stack's engines' max_num_seqs
// (--lending-max-num-seqs).
var lendingMaxNumSeqs = 8

// registerLendingFlags adds the lending workload's flags; it returns the
// lendable pool's replica count.
func registerLendingFlags(fs *flag.FlagSet, lc *bench.LendingConfig) *int {
	fs.Float64Var(&lc.TrainerDuty, "trainer-duty", bench.DefaultTrainerDuty, "lending: share of each cycle the simulated trainer keeps its pool busy")
	fs.DurationVar((*time.Duration)(&lc.TrainerCycle), "trainer-cycle", bench.DefaultTrainerCycle, "lending: length of one trainer cycle (busy, then idle)")
	fs.IntVar(&lc.Cycles, "lending-cycles", bench.DefaultLendingCycles, "lending: trainer cycles of each run (alone, with lending)")
	fs.DurationVar((*time.Duration)(&lc.ReclaimDeadline), "reclaim-deadline", bench.DefaultReclaimDeadline, "lending: reclaim this long before the trainer's next busy phase, with this deadline")
	fs.IntVar(&lc.AsyncJobs, "async-jobs", bench.DefaultAsyncJobs, "lending: background responses kept in flight")
	fs.IntVar(&lc.AsyncOutputTokens, "async-output-tokens", bench.DefaultAsyncOutput, "lending: max_output_tokens of each background response")
	fs.IntVar(&lendingMaxNumSeqs, "lending-max-num-seqs", lendingMaxNumSeqs, "lending: every engine's max_num_seqs, so that the engines, not the CPUs running the benchmark, bound the background work")
	return fs.Int("lendable-replicas", 2, "lending: engines of the lendable pool (the gateway's own pool has --sim-replicas)")
}

// flagSet reports whether the command line set the named flag.
func flagSet(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
