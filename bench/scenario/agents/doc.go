// Package agents is the agents scenario: coding-agent sessions drawn from
// the published shape of agentic traces (workload.AgentSession), N agents
// at once in phases of growing N, and how far each phase's TTFT is from
// the floor that the best possible routing would reach.
//
// # Overview
//
// Run starts each agent at its arrival (workload.AgentsConfig.AgentArrival)
// and keeps it running sessions back to back until the last phase ends.
// A session chains its calls with previous_response_id; a side call and a
// compaction's resume start conversations of their own. Each turn belongs
// to the phase it was sent in (a request is given at least ten minutes
// of the workload's clock: a long answer is not cut by the bench's own
// timeout), and each phase reports TTFT p50/p90/p99,
// output tokens/s, errors by status (408, 429, 503, other), the cached
// tokens the gateway reported over the ideal's (the share of the ideal
// reuse captured), the TTFT floor, and the process's CPU and peak RSS.
//
// The ideal of a turn is what an unbounded cache would hold of its prompt
// from earlier calls: a continuing call's previous answered prompt and
// answer; an opening, resuming or side call's system prompt once any
// earlier call of its tenant carried it (whole 16-token blocks, never the
// last token). Its floor is the rest of its prompt prefilled at one
// replica's modelled rate (AgentsConfig.PrefillTokensPerSecond) with no
// queue, on the wall clock (times Agentic.TimeScale).
//
// CPU is the process's, profiled phase by phase (runtime/pprof) and split
// by who spent it: the bench's own goroutines carry a profiler label,
// samples in the simulator's code are the engines', the runtime's
// background GC is apportioned, and the rest is the gateway's. RSS is the
// process's (VmRSS): the gateway's, the bench client's when the agents
// run in this process (no driver.Target.Tenant), and the engines' when
// they do. With a Target.Tenant, every agent runs in a process of its
// own (RunTenant) and this one records their turns as they end.
//
// # How data enters and leaves
//
// A workload.Config and a driver.Target enter Run; the driver.Result of
// the whole run and the per-phase Report leave it.
//
// # Concurrency model
//
// Run blocks until every agent has stopped; each agent runs in a
// goroutine of its own, and one more cuts the phases' CPU profiles and
// samples RSS.
package agents
