package kv

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// This file must build at older revisions too: scripts/benchcmp.sh copies
// it over the old code's, so that old and new run the same benchmarks
// (scripts/benchcmp.sh --pkg kv OLD NEW RecordChainCold). It therefore
// uses the index through its exported methods only.

// The cold-chain benchmarks are the write a session's first turn costs: a
// chain of coldBlocks blocks (about 48k tokens, a 190 KB prompt) that no
// endpoint holds, recorded by routing (RecordRouted) on one of
// coldEndpoints endpoints of an index already holding coldSessions such
// chains, so that every endpoint is at its capacity and each new chain
// evicts as many blocks as it brings.
const (
	coldBlocks    = 3000
	coldSessions  = 1000
	coldEndpoints = 32
)

// coldFleets are the ways the gateway runs an index: endpoints written by
// routing alone ("alone"), the same as the replicas of one pool, which is
// how the gateway registers every endpoint ("pool"), and replicas whose
// engines also report the blocks they store by KV events ("kv-events").
var coldFleets = []struct {
	name         string
	pool, events bool
}{{"alone", false, false}, {"pool", true, false}, {"kv-events", true, true}}

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
// blocks on coldEndpoints endpoints, as fleet runs them, and the number of
// the next chain.
func coldIndex(pool, events bool) (*Index, uint64) {
	ix := NewIndex(IndexOptions{})
	if pool {
		for ep := range coldEndpoints {
			ix.SetGroup(ep, 0)
		}
	}
	hs := make([]BlockHash, 0, coldBlocks)
	for s := range uint64(coldSessions) {
		hs = coldChain(hs, s+1)
		ep := int(s % coldEndpoints)
		ix.RecordRouted(ep, hs, 0)
		if events {
			engineStores(ix, ep, hs)
		}
	}
	return ix, coldSessions + 1
}

// engineStores records what the engine's BlockStored events report of
// chain hs on endpoint ep: a prefill chunk of 128 blocks (2,048 tokens)
// an event.
func engineStores(ix *Index, ep int, hs []BlockHash) {
	for i := 0; i < len(hs); i += 128 {
		ix.Record(ep, HBM, hs[i:min(i+128, len(hs))])
	}
}

// BenchmarkRecordChainCold records one cold chain per operation.
func BenchmarkRecordChainCold(b *testing.B) {
	for _, f := range coldFleets {
		b.Run(f.name, func(b *testing.B) {
			ix, seq := coldIndex(f.pool, f.events)
			hs := make([]BlockHash, 0, coldBlocks)
			b.ReportAllocs()
			for b.Loop() {
				hs = coldChain(hs, seq)
				ix.RecordRouted(int(seq%coldEndpoints), hs, 0)
				seq++
			}
			b.ReportMetric(coldBlocks, "blocks/op")
		})
	}
}

// BenchmarkRecordChainColdParallel is BenchmarkRecordChainCold from 16
// goroutines at once, each recording distinct chains on endpoints of its
// own choosing: turns arriving together must not wait on one another.
func BenchmarkRecordChainColdParallel(b *testing.B) {
	for _, f := range coldFleets {
		b.Run(f.name, func(b *testing.B) {
			ix, start := coldIndex(f.pool, f.events)
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
					ix.RecordRouted(int(s%coldEndpoints), coldChain(hs, s), 0)
				}
			})
			b.ReportMetric(coldBlocks, "blocks/op")
		})
	}
}

// BenchmarkMatchPrefixWarm looks up a chain of coldBlocks blocks that one
// endpoint holds whole, among the other sessions: a warm turn's lookup.
// On "kv-events" the engine has reported the chain's blocks too.
func BenchmarkMatchPrefixWarm(b *testing.B) {
	for _, f := range coldFleets {
		b.Run(f.name, func(b *testing.B) {
			ix, seq := coldIndex(f.pool, f.events)
			hs := coldChain(nil, seq)
			ix.RecordRouted(3, hs, 0)
			if f.events {
				engineStores(ix, 3, hs)
			}
			out := make([]Match, coldEndpoints)
			b.ReportAllocs()
			for b.Loop() {
				if n := ix.MatchPrefix(hs, out); n != coldBlocks {
					b.Fatalf("matched %d of %d blocks", n, coldBlocks)
				}
			}
		})
	}
}
