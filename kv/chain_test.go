package kv

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// chainTree hands out chained block hashes: a block's hash names its parent
// and its own content, as Hasher's do, over a small alphabet so that chains
// share prefixes.
type chainTree struct {
	rng    *rand.Rand
	child  map[[2]uint64]BlockHash
	parent map[BlockHash]BlockHash // 0 for a root
}

func newChainTree(seed uint64) *chainTree {
	return &chainTree{
		rng:    rand.New(rand.NewPCG(seed, 1)),
		child:  map[[2]uint64]BlockHash{},
		parent: map[BlockHash]BlockHash{},
	}
}

func (c *chainTree) chain(maxLen int) []BlockHash {
	hs := make([]BlockHash, c.rng.IntN(maxLen+1))
	var p BlockHash
	for i := range hs {
		k := [2]uint64{uint64(p), uint64(c.rng.IntN(3))}
		h, ok := c.child[k]
		if !ok {
			h = BlockHash(len(c.child) + 1)
			c.child[k] = h
			c.parent[h] = p
		}
		hs[i], p = h, h
	}
	return hs
}

// checkClosed verifies that a closed endpoint holds every block with its
// whole prefix, ancestors nearer the front.
func checkClosed(t *testing.T, x *Index, tree *chainTree, step int) {
	t.Helper()
	for ep, e := range x.mu.endpoints {
		if e == nil || !e.closed() {
			continue
		}
		l := &e.tiers[HBM]
		pos := map[BlockHash]int{}
		i := 0
		for n := l.list.Front(); n != 0; n = l.list.Next(n) {
			pos[l.list.Value(n).hash] = i
			i++
		}
		for h, at := range pos {
			p := tree.parent[h]
			if p == 0 {
				continue
			}
			if pp, ok := pos[p]; !ok || pp > at {
				t.Fatalf("step %d: closed endpoint %d holds %d at %d without its parent %d in front (at %d, %v)", step, ep, h, at, p, pp, ok)
			}
		}
	}
}

// TestIndexClosedSearchAgreesWithWalk runs random writes of every kind and
// checks that the binary search of closed endpoints finds what the walk over
// every block finds, and that a closed endpoint never holds a block without
// its prefix.
func TestIndexClosedSearchAgreesWithWalk(t *testing.T) {
	const endpoints = 4
	tree := newChainTree(11)
	x := NewIndex(IndexOptions{DefaultCapacity: 24})
	// Each endpoint is the one replica of a pool whose Shared tier holds a
	// block of no chain here: routing's chains go to the block lists,
	// searched while closed, rather than to runs.
	for ep := range endpoints {
		x.SetGroup(ep, ep)
		x.Record(ep, Shared, []BlockHash{1<<60 + BlockHash(ep)})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	searched := 0
	for step := range 20000 {
		ep := rng.IntN(endpoints)
		// Writes that open an endpoint are rare, as they are in routing
		// without events, so that endpoints close again between them.
		switch r := rng.IntN(1000); {
		case r < 550:
			x.RecordChain(ep, tree.chain(12))
		case r < 555:
			hs := tree.chain(12)
			x.Record(ep, HBM, hs[len(hs)/2:])
		case r < 557:
			x.Record(ep, Tier(1+rng.IntN(int(Shared-1))), tree.chain(6))
		case r < 562:
			hs := tree.chain(12)
			x.Remove(ep, Tier(rng.IntN(2)), hs[len(hs)/2:])
		case r < 567:
			x.Clear(ep)
		case r < 590:
			x.SetCapacity(ep, 8+rng.IntN(32))
		default:
			q := tree.chain(14)
			fast := make([]Match, endpoints)
			walk := make([]Match, endpoints)
			bf := x.MatchPrefix(q, fast)
			x.mu.RLock()
			closed := true
			for _, e := range x.mu.endpoints {
				closed = closed && (e == nil || e.closed())
			}
			if closed {
				// What MatchPrefix would search were the pools'
				// Shared tiers empty.
				clear(fast)
				bf = x.matchClosedLocked(q, fast)
			}
			// The walk MatchPrefix takes on an open index, and for
			// endpoints holding runs the same walk over their runs'
			// blocks (in HBM) and their block lists; no endpoint here is
			// ever stale.
			bw := x.matchLinearLocked(q, walk)
			for ep, e := range x.mu.endpoints {
				if e == nil || e.runs.list.Len() == 0 {
					continue
				}
				held := runBlocks(e)
				walk[ep] = Match{}
				for _, h := range q {
					hs := x.mu.blocks[h]
					j := findHolder(hs, ep)
					switch {
					case held[h]:
						walk[ep].ByTier[HBM]++
					case j >= 0:
						walk[ep].ByTier[hs[j].fastest()]++
					}
					if !held[h] && j < 0 {
						break
					}
					walk[ep].Blocks++
				}
				bw = max(bw, walk[ep].Blocks)
			}
			x.mu.RUnlock()
			if bf != bw || !slices.Equal(fast, walk) {
				t.Fatalf("step %d: search %d %+v, walk %d %+v", step, bf, fast, bw, walk)
			}
			if closed && bf > 0 {
				searched++
			}
		}
		if step%50 == 0 {
			checkInvariants(t, x)
			checkClosed(t, x, tree, step)
		}
	}
	if searched < 500 {
		t.Fatalf("only %d matches found something by search: the test does not exercise it", searched)
	}
}

// TestRecordChainNextTurn is an agent's next turn: the held prefix stays
// put, the new blocks go right behind it, and the prefix is moved to the
// front again once it is a quarter of the capacity old.
func TestRecordChainNextTurn(t *testing.T) {
	tree := newChainTree(5)
	x := NewIndex(IndexOptions{DefaultCapacity: 400})
	turn := tree.chain(50)
	for len(turn) < 50 {
		turn = tree.chain(50)
	}
	x.RecordChain(0, turn)
	e := x.mu.endpoints[0]
	// Blocks placed, in the block list or in runs.
	placed := func() uint64 { return e.tiers[HBM].clock + e.runs.clock }
	clock := placed()
	next := append(slices.Clone(turn), BlockHash(1<<40))
	x.RecordChain(0, next)
	if got := placed() - clock; got != 1 {
		t.Fatalf("next turn placed %d nodes, want 1", got)
	}
	out := make([]Match, 1)
	if n := x.MatchPrefix(next, out); n != len(next) {
		t.Fatalf("matched %d of %d", n, len(next))
	}
	// Other chains age the prefix past a quarter of the capacity.
	for range 3 {
		x.RecordChain(1, tree.chain(50))
	}
	for placed()-clock < 100 {
		x.RecordChain(0, tree.chain(40))
	}
	clock = placed()
	x.RecordChain(0, append(slices.Clone(next), BlockHash(1<<41)))
	if got := placed() - clock; got != uint64(len(next)+1) {
		t.Fatalf("an old prefix placed %d nodes, want all %d", got, len(next)+1)
	}
}

// TestRemoveFailedTurnClosesAgain: a failed turn's new blocks are taken
// back, which opens the endpoint; the next chain recorded finds every block
// behind its prefix and closes it again, while a Record of blocks without
// their prefix keeps it open.
func TestRemoveFailedTurnClosesAgain(t *testing.T) {
	tree := newChainTree(9)
	x := NewIndex(IndexOptions{})
	turn := tree.chain(30)
	for len(turn) < 20 {
		turn = tree.chain(30)
	}
	x.RecordChain(0, turn)
	x.Remove(0, HBM, turn[10:])
	e := x.mu.endpoints[0]
	if e.closed() {
		t.Fatal("closed after a Remove")
	}
	x.RecordChain(0, turn[:15])
	if !e.closed() {
		t.Fatal("still open after a chain whose blocks all have their prefix")
	}
	x.Record(0, HBM, turn[12:15])
	x.RecordChain(0, turn)
	if e.closed() {
		t.Fatal("closed with a block moved in front of its parent")
	}
}
