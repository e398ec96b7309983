// Package bench is the load generator and report behind `turnpike bench`:
// Run and Compare, and the names `turnpike bench` uses of its parts.
//
// # Overview
//
// bench drives an OpenAI-compatible gateway with one workload and reports
// what clients saw and what the engines counted. Its parts:
//
//   - bench/workload: what a run sends, and when. The Config (every
//     workload's and scenario's shape, defaults, Validate), the plans
//     (agentic sessions, Mooncake trace replay, long prompts) and the
//     text, a pure function of the seed: equal seeds, equal prompts.
//   - bench/driver: one measured run. The runner with its rate and
//     in-flight caps, the client (openai-go, no retries: a shed is a
//     figure), samples and summaries, ideal reuse, cost, the loads
//     offered beside a run (an interfering client, a batch).
//   - bench/scrape: the engines' and the gateway's /metrics, read before,
//     during and after a run.
//   - bench/scenario/isolation, chaos, overload, lending, lora, agents:
//     scenarios that drive a runner their own way and give a verdict (a
//     Report).
//   - bench/report: the Result and Comparison, and their text, markdown
//     and HTML reports.
//   - bench/overhead: what a proxy costs, measured in front of an engine
//     that answers at once (InstantEngine).
//
// Run validates the Config, runs the workload it names (driver.RunAgentic,
// RunTrace or RunLongPrompt, or a scenario's Run) and returns its Result;
// Compare repeats Run once per policy against a fleet its caller starts
// fresh for each, and computes ratios to round-robin.
//
// # What each figure means and where it is measured
//
// Latencies are taken in this process, from just before the HTTP request
// is written (after the caps, so the bench's own queueing is excluded):
// TTFT to the first non-empty content delta (response.output_text.delta, or
// a chat chunk's delta.content); ITL the gaps between successive deltas (a
// delta may carry several tokens); E2E to the end of the stream. Token
// counts and the cached-token share come from the usage the gateway reports
// (usage.input_tokens_details.cached_tokens, or prompt_tokens_details on
// chat). The engine hit rate is the engines' own count: the change in
// vllm:prefix_cache_hits over vllm:prefix_cache_queries (SGLang: cached over
// prompt tokens, else sglang:cache_hit_rate) between the two scrapes, summed
// over engines. Output tokens/s and requests/s count successful requests
// over the run's wall time. The ideal hit rate is what a perfect router
// could reuse (driver/ideal.go): for agentic runs, the whole blocks of each
// answered prompt an unbounded cache holds from earlier requests (its
// session's previous turn and answer, or its tenant's system prompt); for
// the trace, one global LRU of the fleet's total KV capacity
// (Target.KVCapacityTokens) over the hash ids. Captured is the engine hit
// rate over it; load spread the busiest engine's prompt and generation
// tokens over the mean. A request is shed when the gateway answers 429, or
// 503 with x-turnpike-dropped-reason; failures are classed "http_<status>",
// "timeout", "transport" or "stream". A request the bench cancels itself
// (the run's end cuts it, or the bench is stopped) is cut: counted among a
// summary's requests sent, not among its errors, and left out of the SLO
// attainment (a scenario's own verdicts, such as a rollout's failed turns,
// still count it as not served).
//
// # Concurrency model
//
// Run and Compare block until done; they are safe to call concurrently
// with distinct Configs. Each part's doc says what runs inside a run.
package bench
