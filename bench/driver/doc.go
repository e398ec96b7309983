// Package driver sends a workload to a gateway and measures what clients
// saw and what the engines counted: one measured run.
//
// # Overview
//
// Measure scrapes the engines (bench/scrape), starts a Runner, hands it
// to the caller's drive function, and when drive returns scrapes again
// and builds the Result: every request's Sample summed into Summaries by
// tenant and band, latency CDFs, a timeline, the engines' own account,
// the ideal prefix reuse (ideal.go), the cost per pool (cost.go), and
// the loads offered beside the run (an interfering client straight to
// the engines, a batch through the Batch API). RunAgentic, RunTrace and
// RunLongPrompt are the plain workloads; the scenarios (bench/scenario/…)
// drive a Runner their own way. RunShare and Runner.Apart run a tenant's
// share of a run in another process, on the same clock.
//
// # Request lifecycle and ownership
//
// A Call passes the run's rate cap (pacer) and in-flight cap, then is
// streamed with openai-go (no retries: a shed is a figure); its outcome
// becomes a Sample, owned by the runner from Record on. TTFT runs from
// just before the request is written to the first content delta.
//
// # Concurrency model
//
// Measure and the Run functions block until done and are safe to call
// concurrently with distinct configs. Inside a run, session and request
// goroutines share the sender's clients (read-only after setup), the
// pacer and the samples (each under its own mutex) and the progress
// counters (atomics). A Runner's fields are set before drive and only
// read afterwards.
package driver
