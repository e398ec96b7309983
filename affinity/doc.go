// Package affinity picks the endpoint for each request.
//
// # Overview
//
// A Policy receives the candidate endpoints (those of the pools serving the
// requested model) and returns one. NewPolicy builds one by name from a
// Config: round-robin and least-loaded (blind to cache), session-hash
// (consistent hashing of the session key, the ingress baseline) and
// cache-aware, the default, and cost-aware, cache-aware with the price
// scorer first (price.go: dollars per turn under the band's TTFT target,
// for fleets of pools on different accelerators). Cache-aware is a Pipeline of plugins behind the
// small interfaces of plugin.go: filters drop endpoints that cannot take the
// request, weighted scorers rate the rest (prefix held in the KV-cache index,
// session pin, queue, KV utilisation, in-flight tokens, predicted TTFT), a
// picker chooses, and the load guard spills a pick off an endpoint whose
// queue is far above the pool's mean. The pipeline, not the plugins, clamps
// scores to [0, 1], applies weights and times each plugin. README.md lists
// the plugins.
//
// # Concurrency model
//
// Policies are shared by every request goroutine. They keep only atomics,
// immutable snapshots published through atomic.Pointer (session-hash rings,
// per-endpoint measurements), or state behind the locks of the kv index and
// the sessions store; endpoint state is read through the pools accessors,
// which are lock-free. Per-request scratch (the Cycle: candidate copy, score
// slices, prefix matches) comes from a sync.Pool, so a warm Pick does not
// allocate; scorers write into slices the pipeline owns, indexed by
// candidate position.
//
// # Request lifecycle and ownership
//
// The gateway owns the Request. Before Pick it fills Hashes if NeedsHashes
// says the policy wants them. Pick copies the candidates and does not keep
// them; cache-aware looks the prompt up in the index, runs the pipeline,
// records the prompt on the chosen endpoint ahead of the engine, pins the
// session, and notes its prediction in Request.Routing. The gateway calls
// Done exactly once per Pick with the outcome, also for a failed attempt
// before a retry; Done undoes a failed attempt's speculative record and
// feeds the prediction metrics and the per-endpoint prefill measurements.
// It also compares the cached tokens predicted at the pick with the
// engine's and names the cause of a miss (explain.go, docs/cache.md),
// in metrics and in each endpoint's account (CacheAccuracyOf).
// After the last Done the policy holds nothing of the Request.
package affinity
