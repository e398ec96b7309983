package kv

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// modelIndex is the index written the obvious way: per endpoint and tier, a
// slice of hashes, most recent first.
type modelIndex struct {
	capacity int
	lists    map[[2]int][]BlockHash
}

func (m *modelIndex) record(ep int, tier Tier, hs []BlockHash) {
	k := [2]int{ep, int(tier)}
	l := m.lists[k]
	for i := len(hs) - 1; i >= 0; i-- {
		l = slices.DeleteFunc(l, func(h BlockHash) bool { return h == hs[i] })
		l = slices.Insert(l, 0, hs[i])
	}
	m.lists[k] = l[:min(len(l), m.capacity)]
}

func (m *modelIndex) remove(ep int, tier Tier, hs []BlockHash) {
	k := [2]int{ep, int(tier)}
	m.lists[k] = slices.DeleteFunc(m.lists[k], func(h BlockHash) bool { return slices.Contains(hs, h) })
}

func (m *modelIndex) match(hs []BlockHash, endpoints int) []Match {
	out := make([]Match, endpoints)
	for ep := range out {
	blocks:
		for _, h := range hs {
			for tier := range NumTiers {
				if slices.Contains(m.lists[[2]int{ep, tier}], h) {
					out[ep].Blocks++
					out[ep].ByTier[tier]++
					continue blocks
				}
			}
			break
		}
	}
	return out
}

// checkInvariants verifies that the block map and the LRU lists agree.
func checkInvariants(t *testing.T, x *Index) {
	t.Helper()
	x.mu.RLock()
	defer x.mu.RUnlock()
	held := 0
	for h, holders := range x.mu.blocks {
		if len(holders) == 0 {
			t.Fatalf("block %x has no holders but is in the map", h)
		}
		for _, hd := range holders {
			if hd.empty() {
				t.Fatalf("block %x: empty holder for endpoint %d", h, hd.endpoint)
			}
			for tier, n := range hd.node {
				if n == 0 {
					continue
				}
				held++
				var l *tierList
				if g := -int(hd.endpoint) - 1; g >= 0 {
					l = &x.mu.groups[g].shared
				} else {
					l = &x.mu.endpoints[hd.endpoint].tiers[tier]
				}
				if got := l.list.Value(n).hash; got != h {
					t.Fatalf("block %x: endpoint %d %s node holds %x", h, hd.endpoint, Tier(tier), got)
				}
			}
		}
	}
	listed := 0
	lists := []*tierList{}
	for _, e := range x.mu.endpoints {
		if e == nil {
			continue
		}
		for tier := range e.tiers {
			lists = append(lists, &e.tiers[tier])
		}
	}
	for _, g := range x.mu.groups {
		lists = append(lists, &g.shared)
	}
	for _, l := range lists {
		n := 0
		for i := l.list.Front(); i != 0; i = l.list.Next(i) {
			n++
		}
		if n != l.list.Len() || l.list.Len() > l.capacity {
			t.Fatalf("list of %d nodes, len %d, capacity %d", n, l.list.Len(), l.capacity)
		}
		listed += n
	}
	if held != listed {
		t.Fatalf("%d holdings in the map, %d nodes in the lists", held, listed)
	}
	checkRuns(t, x)
}

func TestIndexRandomAgainstModel(t *testing.T) {
	const endpoints, capacity = 5, 12
	rng := rand.New(rand.NewPCG(7, 8))
	x := NewIndex(IndexOptions{DefaultCapacity: capacity})
	m := &modelIndex{capacity: capacity, lists: map[[2]int][]BlockHash{}}
	// Chains over a small alphabet of blocks, so they overlap.
	chain := func() []BlockHash {
		hs := make([]BlockHash, rng.IntN(8))
		for i := range hs {
			hs[i] = BlockHash(rng.IntN(30) + 1)
		}
		return hs
	}
	for step := range 5000 {
		ep, tier := rng.IntN(endpoints), Tier(rng.IntN(NumTiers))
		switch r := rng.IntN(20); {
		case r < 12:
			hs := chain()
			x.Record(ep, tier, hs)
			m.record(ep, tier, hs)
		case r < 18:
			hs := chain()
			x.Remove(ep, tier, hs)
			m.remove(ep, tier, hs)
		case r < 19:
			x.Clear(ep)
			for tier := range NumTiers {
				delete(m.lists, [2]int{ep, tier})
			}
		default:
			q := chain()
			got := make([]Match, endpoints)
			x.MatchPrefix(q, got)
			if want := m.match(q, endpoints); !slices.Equal(got, want) {
				t.Fatalf("step %d: MatchPrefix(%v) = %+v, want %+v", step, q, got, want)
			}
		}
		for tier := range NumTiers {
			k := [2]int{ep, tier}
			var got []BlockHash
			if ep < len(x.mu.endpoints) && x.mu.endpoints[ep] != nil {
				l := &x.mu.endpoints[ep].tiers[tier]
				for i := l.list.Front(); i != 0; i = l.list.Next(i) {
					got = append(got, l.list.Value(i).hash)
				}
			}
			if !slices.Equal(got, m.lists[k]) {
				t.Fatalf("step %d: endpoint %d %s LRU = %v, want %v", step, ep, Tier(tier), got, m.lists[k])
			}
		}
		if step%100 == 0 {
			checkInvariants(t, x)
		}
	}
	checkInvariants(t, x)
}

// TestIndexConcurrent runs writers and readers together; run it with -race.
func TestIndexConcurrent(t *testing.T) {
	x := NewIndex(IndexOptions{DefaultCapacity: 64})
	var h Hasher
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			tokens := make([]uint32, 40*DefaultBlockSize)
			var hs []BlockHash
			out := make([]Match, 8)
			for range 300 {
				for i := range tokens {
					tokens[i] = rng.Uint32N(4) // few distinct chains
				}
				hs = h.HashTokens(hs[:0], "m", tokens)
				ep := rng.IntN(8)
				switch rng.IntN(6) {
				case 0:
					x.Remove(ep, HBM, hs[:10])
				case 1:
					x.SetStale(ep, !x.Stale(ep))
				case 2:
					_ = x.EndpointStats(ep)
					_ = x.Stats()
				case 3:
					x.MatchPrefix(hs, out)
				default:
					x.Record(ep, Tier(rng.IntN(NumTiers)), hs)
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, x)
}
