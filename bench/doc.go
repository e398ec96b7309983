// Package bench is the load generator and report behind `turnpike bench`.
//
// # Overview
//
// bench drives an OpenAI-compatible gateway with one of four workloads and
// reports what clients saw and what the engines counted:
//
//   - agentic: concurrent agent sessions. Each tenant has a shared system
//     prompt and tool schema (deterministic text); each session opens with
//     it, then grows its context every turn with tool results after
//     sub-second gaps, with some human turns after seconds of think time.
//     Sessions start in waves (bursts), or closed loop (Concurrency): so many
//     at once, the next as soon as one ends, so that the fleet and not the
//     workload's clock sets the pace. TimeScale puts the gaps on the
//     simulated fleet's clock. On the Responses API a turn sends only
//     its new input, chained with previous_response_id; on chat completions
//     (Config.API "chat") it sends the whole history and an x-session-id.
//   - trace: replay of a Mooncake-format trace (timestamp, input_length,
//     output_length, hash_ids). Each hash id becomes a fixed 512-token block of
//     text (BlockText), so equal ids are equal prefixes; requests go out open
//     loop at their scaled timestamps, on chat completions, with no session id.
//   - isolation: tenant A's interactive turns at a steady rate through one
//     run in which stretches of A alone take turns with stretches where
//     tenant B keeps BurstMultiple × FleetSlots agent loops in flight
//     (isolationPlan); the report compares A's p99 TTFT in the two, round by
//     round and overall, and lists sheds by band/reason.
//   - chaos: the agentic sessions, alternately on chat completions and the
//     Responses API, while Target.Replicas kills replicas and restarts them
//     on a schedule (ChaosConfig, PlanChaos). ChaosReport sorts failures by
//     whether the client had seen the stream start, reads the gateway's
//     stream migrations and retries from its /metrics before and after, and
//     watches each restarted replica's /metrics for its first traffic.
//   - lending: a simulated trainer keeps a lendable pool's engines busy for
//     a share of every cycle, run once alone and once lending the idle
//     phases to background responses through the admin API; LendingReport
//     gives the pool's duty cycle, the background work done and whether each
//     reclaim freed the pool by its deadline (lending.go).
//
// Apart from these, RunOverhead measures what a proxy costs: closed-loop
// clients post large agent requests (AgentChatBody) to each target in
// turn, rounds rotated, and it reports req/s, latency, errors and each
// target process's CPU per request; InstantEngine is the engine behind the
// targets, answering at once (scripts/overhead.sh wires them up).
//
// Generated text is three-letter words and spaces, 4 bytes per token, a pure
// function of the seed (PlanAgentic, SystemPrompt, BlockText), so two runs with
// one seed send byte-identical prompts.
//
// # How a run flows
//
// Run validates the Config, plans the workload, scrapes every
// Target.EngineMetricsURLs once, starts one goroutine per session (or per
// trace request), and scrapes again when all have ended. Each request first
// passes the global rate cap (Config.Rate) and the in-flight cap
// (Config.MaxInFlight), then is streamed with openai-go (no retries: a shed is
// a figure). Compare repeats Run once per policy against a fleet its caller
// starts fresh for each, and computes ratios to round-robin. A progress bar
// goes to Config.Progress (stderr by default): \r redraws on a terminal,
// a line every few seconds elsewhere.
//
// # What each figure means and where it is measured
//
// All latencies are taken in this process, from just before the HTTP request
// is written (after the caps, so the bench's own queueing is excluded):
// TTFT to the first non-empty content delta (response.output_text.delta, or
// a chat chunk's delta.content); ITL the gaps between successive deltas (a
// delta may carry several tokens); E2E to the end of the stream. Token counts
// and the cached-token share come from the usage the gateway reports
// (usage.input_tokens_details.cached_tokens, or prompt_tokens_details on chat).
// The engine hit rate is the engines' own count: the change in
// vllm:prefix_cache_hits over vllm:prefix_cache_queries (SGLang: cached over
// prompt tokens, else sglang:cache_hit_rate) between the two scrapes, summed
// over engines. Output tokens/s and requests/s count successful requests over
// the run's wall time. The ideal hit rate is what a perfect router could
// reuse (ideal.go): for agentic runs, the whole blocks of each answered
// prompt an unbounded cache holds from earlier requests (its session's
// previous turn and answer, or its tenant's system prompt); for the trace,
// one global LRU of the fleet's total KV capacity (Target.KVCapacityTokens)
// over the hash ids. Captured is the engine hit rate over it; load spread
// the busiest engine's prompt and generation tokens over the mean. A request is shed when the gateway answers 429, or 503
// with x-turnpike-dropped-reason; failures are classed "http_<status>",
// "timeout", "canceled", "transport" or "stream".
//
// # Concurrency model
//
// Run and Compare block until done; they are safe to call concurrently with
// distinct Configs. Inside a run, session and request goroutines share only
// the sender's clients (read-only after setup), the pacer and the sample list
// (each under its own mutex) and the progress counters (atomics).
//
// Results marshal to JSON as is (Result, Comparison); WriteText and
// WriteMarkdown print tables; WriteHTML writes a self-contained page with
// inline SVG plots.
package bench
