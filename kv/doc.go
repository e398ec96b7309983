// Package kv is the gateway's KV-cache index: which endpoint holds which
// blocks of which prompts, in which tier. It is not a key-value store; the
// durable state store is another package's.
//
// # Overview
//
// A Hasher hashes a prompt's token ids (package prompt renders and
// tokenizes it) into a chain of BlockHash values, one per full block of
// BlockSize tokens, each covering its whole prefix. A conversation that grows keeps the chain of
// its earlier turns, so its hashes tell where its KV cache already is.
// A chain starts from its model's seed (ModelSeed), and a LoRA adapter is
// a model of its own: its blocks are never the base model's, as in the
// engine, whose KV events name the adapter of stored blocks (lora_id,
// lora_name) for the Subscriber to seed their chain with.
//
// The Index maps each BlockHash to the endpoints holding it and the tiers
// (HBM, CPU, Disk, Shared) they hold it in, each endpoint's tiers bounded by
// LRU at the engine's real capacity. MatchPrefix reports, per endpoint, the
// longest prefix of a chain it holds and the tier mix of that prefix; the
// affinity scorer turns that into a score with TierWeights.
//
// Routing's records are held as runs: a piece of a chain in one slice,
// behind its parent run, only its first block in the map (run.go). A cold
// chain of thousands of blocks is then one copy and one map insert, and a
// lookup a few map lookups and binary searches. The blocks an engine's KV
// events report are held one map entry and one LRU node each (chain.go
// says how those are searched), beside the runs: a match follows the runs
// and then the blocks, and once events feed an endpoint its runs keep only
// a window of the newest records, what the engine has yet to report. A
// pool's replicas hold runs until a block is reported in the pool's Shared
// tier, which turns their runs into blocks.
//
// # Data flow
//
// The index is fed two ways. Speculatively, by routing: once the gateway
// sends a prompt to an endpoint it calls Record, since the engine is about to
// cache those blocks. Precisely, by engine KV events: a Subscriber per
// endpoint receives vLLM's ZMQ stream (DecodeBatch), re-hashes the token ids
// of stored blocks into the gateway's own chain, remembers which engine hash
// is which gateway hash, and applies stores, removals and clears. A gap in
// the event sequence marks the endpoint stale (Match.Stale) until the engine
// clears its cache or events have flowed without a gap for RecoverAfter.
//
// Several gateways on one fleet share the speculative records: a Peers
// publishes what RecordRouted records to the others over a PeerTransport
// and applies theirs with Record, which publishes nothing; KV events are
// not shared, since every gateway subscribes to the engines itself.
//
// # Concurrency model
//
// Index is safe for concurrent use: writers (Record, Remove, Clear,
// SetCapacity) take a write lock, MatchPrefix a read lock, and MatchPrefix
// and Hasher.HashTokens do not allocate, writing into caller-owned slices.
// The lock is held once a call. RecordChain and MatchPrefix do work that
// grows with the runs they touch rather than the chain's blocks, so turns
// recording chains at once wait on each other for tens of microseconds: a
// cold 3,000-block chain among 1,000 sessions on 32 endpoints is recorded
// in 13 µs (replicas of one pool) to 44 µs (fed by KV events too), 16 and
// 58 µs an operation with 16 goroutines at it, and a warm one matched in
// 0.2 µs, on a 2-core machine (scripts/benchcmp.sh --pkg kv a8496aa c4ee58d
// 'RecordChainCold|MatchPrefixWarm': 3.9 ms, 2.6–2.8 ms and up to 108 µs
// before). Record, from KV events, does work that grows with the blocks an
// event reports, and a Remove reads the endpoint's runs (at most an eighth
// of its capacity once events feed it).
// Counters are atomics. The goroutine a Subscriber's Start starts, until
// Close, is its only writer; its Stats may be read from any goroutine. A Peers runs one goroutine that
// publishes and one that applies; RecordRouted only queues a copy.
package kv
