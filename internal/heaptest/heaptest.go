package heaptest

import "runtime"

// Live returns the heap's live bytes (HeapAlloc) and its in-use spans
// (HeapInuse) after two full collections: the second frees what the
// first's finalizers and sync.Pool cleanup let go.
func Live() (alloc, inuse uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapInuse
}
