//go:build !unix

package gateway

// mapStage makes a stage of capacity n: without mmap, on the Go heap.
func mapStage(n int) []byte { return make([]byte, 0, n) }

// unmapStage leaves the stage to the collector.
func unmapStage([]byte) {}
