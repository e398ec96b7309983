// Package state is turnpike's durable store. It opens, syncs and closes
// the database (an embedded Pebble under the data dir; a Redis or Valkey
// that several gateways share; or memory for tests and a gateway that
// keeps nothing across restarts) and hands each owner a Namespace: a key
// prefix of its own with get, put, delete, ordered range scans and atomic
// batches. Open picks the backend from a Config.
//
// # Overview
//
// cmd opens one DB and gives each owner (responses, sessions, admin) the
// Namespace for its prefix; owners never see another's keys, and they keep
// their own key layout and value encoding: to this package keys and values
// are bytes. A missing key is ErrNotFound, whatever the implementation; an
// operation on a closed DB is ErrClosed.
//
// Put and Delete are durable when they return. A Batch is applied whole or
// not at all; with Sync it is durable when Apply returns, without it the
// next synced write (of any namespace of the DB) or a clean Close makes it
// durable. An unsynced batch is for writes that may be lost in a crash
// until something depends on them: stream events ahead of the response
// record that ends them.
//
// # Concurrency model
//
// A DB and its namespaces are safe for concurrent use, and writers take no
// lock of ours: each Apply commits its own batch, and Pebble's commit
// pipeline shares one WAL sync among the synced batches waiting at once
// (Redis under appendfsync always shares one AOF fsync among the writes
// of an event-loop turn).
// A read-modify-write that must not interleave with another is the
// owner's to serialise. Every operation holds the DB's read lock and Close
// takes it for writing: Close waits for the operations in flight, and
// later ones answer ErrClosed. So a Scan callback must not call into the
// DB: with Close waiting, the nested call would wait for ever. Collect
// what the callback finds and act on it after Scan returns.
//
// # Health
//
// A failure of the store's own (Redis unreachable, timing out or
// refusing; a disk refusing a write) is returned wrapped in
// ErrUnavailable, and takes the DB down; an operation begun after that
// failure and answered brings it back. DB.Health (and each Namespace's)
// reads that state with one atomic load, so an owner asks it before work
// that must be stored, such as a turn an engine would answer for nothing.
// On Redis, a probe pings every RedisOptions.HealthInterval while no
// operation has been answered since the last ping: it finds an outage
// when nothing else is asking, and the server's return while owners
// refuse their work. A missing key, a scan callback's error and a caller
// that gave up (its context ended) say nothing of the store.
//
// # Redis
//
// A namespace is one hash tag, <KeyPrefix>{<prefix>}: its values are
// strings under it and a sorted set, all scores 0, holds its keys for
// byte-ordered scans (ZRANGEBYLEX). Batches are one MULTI/EXEC, or one
// Lua script when they hold a DeletePrefix; a scan reads pages of
// RedisOptions.ScanPage keys with their values in one script each, so a
// page is a consistent view and a longer scan may see a write that
// committed between pages. Durability is the server's (appendfsync);
// with RedisOptions.Replicas a synced batch also waits for replicas (WAIT).
// docs/state.md has the table of what each setting survives.
//
// DB.Broadcast is a channel every process on one Redis hears (PUBLISH and
// SUBSCRIBE), for hints that may be lost, such as the gateways' routing
// records; it is nil on Pebble and memory, which one process owns.
//
// Slices handed to Put and a Batch belong to the store until the call
// (Apply, for a batch) returns; slices handed to a Scan callback are valid
// only during that call, and Get returns a copy the caller owns.
package state
