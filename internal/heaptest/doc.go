// Package heaptest measures the Go heap for the tests that bound what a
// structure costs in memory: Live is the heap's live bytes once
// collections have left only what is reachable.
package heaptest
