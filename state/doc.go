// Package state is turnpike's durable store. It opens, syncs and closes
// the database (an embedded Pebble under the data dir, or memory for tests
// and a gateway that keeps nothing across restarts) and hands each owner a
// Namespace: a key prefix of its own with get, put, delete, ordered range
// scans and atomic batches.
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
// pipeline shares one WAL sync among the synced batches waiting at once.
// A read-modify-write that must not interleave with another is the
// owner's to serialise. Every operation holds the DB's read lock and Close
// takes it for writing: Close waits for the operations in flight, and
// later ones answer ErrClosed. So a Scan callback must not call into the
// DB: with Close waiting, the nested call would wait for ever. Collect
// what the callback finds and act on it after Scan returns.
//
// Slices handed to Put and a Batch belong to the store until the call
// (Apply, for a batch) returns; slices handed to a Scan callback are valid
// only during that call, and Get returns a copy the caller owns.
package state
