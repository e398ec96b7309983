package kv

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// The cold-chain benchmarks are the write a session's first turn costs: a
// chain of coldBlocks blocks (about 48k tokens, a 190 KB prompt) that no
// endpoint holds, recorded on one of coldEndpoints endpoints of an index
// already holding coldSessions such chains, so that every endpoint is at
// its capacity and each new chain evicts as many blocks as it brings.
const (
	coldBlocks    = 3000
	coldSessions  = 1000
	coldEndpoints = 32
)

// coldChain fills hs with a chain no other call returns: seq numbers the
// chains, and a block's hash mixes its chain's and its own number.
func coldChain(hs []BlockHash, seq uint64) []BlockHash {
	hs = hs[:0]
	for i := range coldBlocks {
		hs = append(hs, BlockHash(splitmix(seq<<16|uint64(i))))
	}
	return hs
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// coldIndex returns an index holding coldSessions chains of coldBlocks
// blocks on coldEndpoints endpoints, and the number of the next chain.
func coldIndex() (*Index, uint64) {
	ix := NewIndex(IndexOptions{})
	hs := make([]BlockHash, 0, coldBlocks)
	for s := range uint64(coldSessions) {
		ix.RecordChain(int(s%coldEndpoints), coldChain(hs, s+1))
	}
	return ix, coldSessions + 1
}

// BenchmarkRecordChainCold records one cold chain per operation.
func BenchmarkRecordChainCold(b *testing.B) {
	ix, seq := coldIndex()
	hs := make([]BlockHash, 0, coldBlocks)
	b.ReportAllocs()
	for b.Loop() {
		hs = coldChain(hs, seq)
		ix.RecordChain(int(seq%coldEndpoints), hs)
		seq++
	}
	b.ReportMetric(coldBlocks, "blocks/op")
}

// BenchmarkRecordChainColdParallel is BenchmarkRecordChainCold from 16
// goroutines at once, each recording distinct chains on endpoints of its
// own choosing: turns arriving together must not wait on one another.
func BenchmarkRecordChainColdParallel(b *testing.B) {
	ix, start := coldIndex()
	var seq atomic.Uint64
	seq.Store(start)
	// RunParallel starts parallelism × GOMAXPROCS goroutines.
	b.SetParallelism((16 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		hs := make([]BlockHash, 0, coldBlocks)
		for pb.Next() {
			s := seq.Add(1)
			ix.RecordChain(int(s%coldEndpoints), coldChain(hs, s))
		}
	})
	b.ReportMetric(coldBlocks, "blocks/op")
}

// BenchmarkMatchPrefixWarm looks up a chain of coldBlocks blocks that one
// endpoint holds whole, among the other sessions: a warm turn's lookup.
func BenchmarkMatchPrefixWarm(b *testing.B) {
	ix, seq := coldIndex()
	hs := coldChain(nil, seq)
	ix.RecordChain(3, hs)
	out := make([]Match, coldEndpoints)
	b.ReportAllocs()
	for b.Loop() {
		if n := ix.MatchPrefix(hs, out); n != coldBlocks {
			b.Fatalf("matched %d of %d blocks", n, coldBlocks)
		}
	}
}
