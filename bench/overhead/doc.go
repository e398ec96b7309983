// Package overhead measures what a proxy costs: closed-loop clients post
// large agent requests to each target in turn, and the figures are
// requests per second, latency, errors and each target process's CPU per
// request.
//
// # Overview
//
// Measure builds one chat body per client (workload.AgentChatBody, about
// 168 KiB of a coding agent's history), waits for every Target to answer
// 200, then runs each target Rounds times, the order rotated every round
// so that the machine's drift falls on all alike; a client's successive
// requests are the next turns of its session, the same body, or cold
// sessions (Config.Turns). CPU time comes from /proc/<pid>/stat of the
// target's process, the engine's and this one. InstantEngine is the
// engine behind the targets: OpenAI-compatible and vLLM-shaped on
// /metrics, it answers at once from answers built in advance and parses
// no body, so that it costs less than what is measured in front of it
// (scripts/overhead.sh wires them up).
//
// # How data enters and leaves
//
// Targets are "name=url[,pid=N]" (ParseTarget); the Result marshals to
// JSON as is, and prints as a table (WriteText, WriteMarkdown).
//
// # Concurrency model
//
// Measure blocks until done and runs one client goroutine per
// Concurrency while a target is measured. An InstantEngine is safe for
// concurrent use: its counters are atomics and its buffers pooled.
package overhead
