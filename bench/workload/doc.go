// Package workload is what a benchmark run sends, and when: the Config
// that describes a run (every workload's and scenario's shape, its
// defaults and its Validate), and the plans and text made from it.
//
// # Overview
//
// A plan is a pure function of the Config and its seed: PlanAgentic's
// sessions (tenants' shared system prompts, contexts that grow every
// turn, gaps on the workload's clock), AgentSession's coding-agent
// sessions of the published agentic-trace shape (side calls,
// compactions), PlanTrace's replay of a
// Mooncake-format trace (each hash id a fixed 512-token block of
// BlockText), PlanLongPrompt's Poisson arrivals of unique long prompts.
// All text is three-letter words and spaces, 4 bytes a token
// (BytesPerToken), drawn from Rand seeded with Mix, so two runs with one
// seed send byte-identical prompts; AgentChatBody builds a coding agent's
// chat body for the proxy-overhead measurement the same way.
//
// # How data enters and leaves
//
// A Config comes from flags or YAML (every field's comment gives its
// default and unit); EnsureDefaults fills it and Validate reports every
// problem at once. Plans leave as Sessions, Items and TraceRequests for
// bench/driver to send; nothing here does I/O but LoadTrace's reading of
// the trace file.
//
// # Concurrency model
//
// Everything is a value or a pure function; a TraceReader belongs to one
// goroutine.
package workload
