//go:build race

package kv

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// pooled paths allocate.
const raceEnabled = true
