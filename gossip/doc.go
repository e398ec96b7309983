// Package gossip carries what one gateway alone knows to the other gateways of a fleet, over a
// channel every gateway hears (a Transport: state.Broadcast, Redis pub/sub, in production;
// Loopback in one process). It is for figures that may be a moment stale, never for state.
//
// # Overview
//
// An Exchange keeps, in every gateway, the latest snapshot each other gateway reports of one
// thing: pools.LoadShare its requests in flight on each engine, responses.Service.HeldExchange the
// background responses it holds. The exchange owns the framing (exchange, sender, time sent) and
// the bookkeeping of peers; its Codec owns the body: what to report, how to read a peer's, what
// to do with them all. A report replaces its sender's last, so a lost one costs an Interval; one
// older than the last is dropped; a sender not heard from for MaxAge is forgotten, and one that
// closes says so with an empty report. At most MaxPeers gateways are kept.
//
// Follow and Reader serve users with a wire of their own: kv.Peers sends routing records, which
// are changes rather than snapshots, over a Transport; Follow subscribes again after a broken
// subscription; Reader decodes a peer's message field by field, each read bounded by what is
// left, so a malformed message is an error, never a panic or an allocation of its claimed size.
//
// # Data flow
//
// Out: every Interval the exchange asks the codec for this gateway's snapshot (Report), frames
// it and publishes it; an empty snapshot is published once, and again only after a full one.
// In: one subscription hands each message to the exchange, which skips its own gateway's and
// other exchanges' reports, decodes the body (Decode), and hands the codec the snapshots of
// every peer heard from within MaxAge (Peers) whenever that set changes. Metrics count reports
// published, applied and dropped (by reason), and the peers heard from, by exchange.
//
// # Concurrency model
//
// New validates and starts nothing. Start starts two goroutines: one publishes and expires
// peers, one applies what arrives. Close publishes a final empty report, stops and joins them,
// and forgets the peers. The peers are guarded by the exchange's lock: Report runs on the
// publishing goroutine, Decode on the applying one, Peers under the lock (so it must not call
// Fresh, which takes it). Fresh may be called from any goroutine. A body handed to Decode, and
// the bytes a Reader returns, alias the message and are valid only during the call.
package gossip
