// Package lru keeps things in least-recently-used order: a List of values,
// most recent at the front, and a Cache, a map bounded by evicting the
// least recently used of its entries.
//
// # Overview
//
// List is the order alone. Its nodes live in one slice and are named by a
// Node, a small integer, so that a caller can keep a node's name in its
// own tables (the KV index keeps one per block and tier) and a list that
// churns at its bound allocates nothing. It also places a node behind
// another, not only at the front: the KV index keeps a chain's new blocks
// right behind the prefix they extend. Callers that bound a List do it
// themselves, by count, by bytes they tally, or by the slots they have.
//
// Cache is a List with a map from keys to nodes, bounded by count or by
// a cost function (bytes, say): adding an entry evicts the least recently
// used while the total is over the capacity.
//
// # Concurrency model
//
// Neither is safe for concurrent use: the owner locks around them.
//
// # Why not a library
//
// hashicorp/golang-lru/v2 is a Cache by count only, allocates an element
// on every add, and has neither node names nor placement behind a node,
// which the KV index and the simulator's block tables need.
package lru
