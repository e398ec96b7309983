package kv

import (
	"runtime"
	"testing"

	"github.com/turnpike-gateway/turnpike/internal/heaptest"
)

// liveHeap is the heap's live bytes after a collection.
func liveHeap() uint64 {
	alloc, _ := heaptest.Live()
	return alloc
}

// TestIndexMemoryBound fills an index with more sessions' cold chains
// than its endpoints can hold, written by routing (RecordChain: runs), by
// KV events (Record: one map entry and LRU node a block) and by both, and
// checks that it holds no more than its bound and what it costs a block;
// docs/memory.md quotes the figures it logs:
//
//	go test ./kv -run TestIndexMemoryBound -v -count=1
func TestIndexMemoryBound(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("measures the heap: not under -race or -short")
	}
	const (
		endpoints = 32
		capacity  = 16 << 10 // blocks per endpoint and tier
		sessions  = 1000
		blocks    = 3125 // a 50k-token prompt in 16-token blocks
	)
	for _, tc := range []struct {
		name   string
		record func(ix *Index, ep int, hs []BlockHash)
		// bound is how many blocks an endpoint holds in HBM, in runs
		// and blocks, at most.
		bound int
	}{
		{"routing", func(ix *Index, ep int, hs []BlockHash) { ix.RecordChain(ep, hs) }, capacity},
		{"events", func(ix *Index, ep int, hs []BlockHash) { ix.Record(ep, HBM, hs) }, capacity},
		// Both, as an engine's events report what routing recorded:
		// the runs keep a window beside the blocks.
		{"routing+events", func(ix *Index, ep int, hs []BlockHash) {
			ix.RecordChain(ep, hs)
			ix.Record(ep, HBM, hs)
		}, capacity + capacity/runWindow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := liveHeap()
			ix := NewIndex(IndexOptions{DefaultCapacity: capacity})
			hs := make([]BlockHash, 0, blocks)
			for s := range uint64(sessions) {
				hs = hs[:0]
				for i := range uint64(blocks) {
					hs = append(hs, BlockHash(splitmix(s<<16|i)))
				}
				tc.record(ix, int(s%endpoints), hs)
			}
			after := liveHeap()
			held := 0
			for ep := range endpoints {
				st := ix.EndpointStats(ep)
				if st.Blocks[HBM] > tc.bound {
					t.Errorf("endpoint %d holds %d blocks in HBM, bound %d", ep, st.Blocks[HBM], tc.bound)
				}
				held += st.Blocks[HBM]
			}
			if held > endpoints*tc.bound {
				t.Fatalf("index holds %d blocks, bound %d", held, endpoints*tc.bound)
			}
			perBlock := float64(after-before) / float64(held)
			t.Logf("%s: %d blocks held (bound %d × %d), %.1f MiB live, %.0f B a block",
				tc.name, held, endpoints, tc.bound, float64(after-before)/(1<<20), perBlock)
			// Keeps the figure in docs/memory.md honest: a block
			// costs less than 200 bytes either way.
			if perBlock > 200 {
				t.Errorf("%.0f B a block, want ≤ 200", perBlock)
			}
			runtime.KeepAlive(ix)
		})
	}
}

// TestIndexMaxCapacity: an engine that reports a larger KV cache than the
// index's MaxCapacity is held to MaxCapacity blocks, by routing and by
// events alike; a negative MaxCapacity takes the engine's word.
func TestIndexMaxCapacity(t *testing.T) {
	hs := make([]BlockHash, 0, 300)
	chain := func(seq uint64) []BlockHash {
		hs = hs[:0]
		for i := range uint64(300) {
			hs = append(hs, BlockHash(splitmix(seq<<16|i)))
		}
		return hs
	}
	for _, tc := range []struct {
		max, want int
	}{{100, 100}, {0, 1000}, {-1, 1000}} {
		ix := NewIndex(IndexOptions{MaxCapacity: tc.max})
		ix.SetCapacity(0, 1000) // the engine's report
		ix.SetCapacity(1, 1000)
		for s := range uint64(10) {
			ix.RecordChain(0, chain(s))
			ix.Record(1, HBM, chain(s+100))
			ix.Record(1, CPU, chain(s+200))
		}
		for ep := range 2 {
			st := ix.EndpointStats(ep)
			if st.Capacity[HBM] != tc.want || st.Blocks[HBM] != tc.want {
				t.Errorf("MaxCapacity %d: endpoint %d holds %d of capacity %d in HBM, want %d of %d",
					tc.max, ep, st.Blocks[HBM], st.Capacity[HBM], tc.want, tc.want)
			}
		}
		if st := ix.EndpointStats(1); st.Blocks[CPU] != tc.want {
			t.Errorf("MaxCapacity %d: endpoint 1 holds %d blocks in CPU, want %d", tc.max, st.Blocks[CPU], tc.want)
		}
	}
	// The default capacity of tiers no engine reported is cut too.
	ix := NewIndex(IndexOptions{MaxCapacity: 100})
	if got := ix.EndpointStats(0); got.Capacity[HBM] != 0 {
		t.Fatalf("unseen endpoint has capacity %d", got.Capacity[HBM])
	}
	ix.RecordChain(0, chain(1))
	if st := ix.EndpointStats(0); st.Capacity[Disk] != 100 || st.Blocks[HBM] != 100 {
		t.Errorf("default capacity: %+v, want 100 blocks held of 100", st)
	}
}

// TestEngineMapMemory: a Subscriber's map from its engine's block hashes
// to the gateway's holds no more than its limit and what it costs a
// mapping; docs/memory.md quotes the figure it logs:
//
//	go test ./kv -run TestEngineMapMemory -v -count=1
func TestEngineMapMemory(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("measures the heap: not under -race or -short")
	}
	const (
		endpoints = 8
		limit     = 64 << 10
	)
	before := liveHeap()
	maps := make([]engineMap, endpoints)
	for e := range maps {
		maps[e].init()
		for i := range uint64(2 * limit) {
			maps[e].put(EngineHash(splitmix(uint64(e)<<32|i)), BlockHash(i), limit)
		}
	}
	after := liveHeap()
	held := 0
	for e := range maps {
		if n := maps[e].Len(); n > limit {
			t.Errorf("endpoint %d maps %d engine hashes, limit %d", e, n, limit)
		}
		held += maps[e].Len()
	}
	perMapping := float64(after-before) / float64(held)
	t.Logf("%d mappings held (limit %d × %d), %.1f MiB live, %.0f B a mapping", held, endpoints, limit, float64(after-before)/(1<<20), perMapping)
	if perMapping > 100 {
		t.Errorf("%.0f B a mapping, want ≤ 100", perMapping)
	}
	runtime.KeepAlive(maps)
}
