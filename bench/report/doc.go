// Package report is what a benchmark run yields and how it is written:
// the Result of a run (the driver's figures and, for a scenario, its
// verdict), the Comparison of one workload run per routing policy, and
// the text, markdown and HTML reports of both.
//
// # Overview
//
// ResultOf makes a Result of a driver.Result; bench.Run sets the
// scenario's Report on it (isolation, chaos, overload, lending). Compared
// computes each policy's ratios to the baseline ("round-robin" when it
// ran) and, over repeated runs, each figure's median and how often a
// policy did at least as well as the baseline's run of the same
// repetition. WriteText and WriteMarkdown print tables (latencies in ms);
// WriteHTML writes one self-contained page with inline SVG plots (latency
// CDFs, throughput over time) that loads nothing from elsewhere and
// escapes every name. Each scenario's section, the cost per pool and the
// loads beside a run are printed here too, so one file per section says
// how it reads. Table is the aligned text and markdown table, which the
// proxy-overhead report prints with as well.
//
// # How data enters and leaves
//
// Results enter as values (from bench.Run or decoded from their JSON,
// which they marshal to as is: the driver's fields in its order, then the
// verdict); reports leave through an io.Writer.
//
// # Concurrency model
//
// The writers only read what they are given; a Result is not to be
// changed while one of them prints it.
package report
