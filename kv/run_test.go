package kv

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// runBlocks is the set of blocks endpoint e holds in runs.
func runBlocks(e *endpointState) map[BlockHash]bool {
	held := map[BlockHash]bool{}
	for n := e.runs.list.Front(); n != 0; n = e.runs.list.Next(n) {
		for _, h := range (*e.runs.list.Value(n)).hashes {
			held[h] = true
		}
	}
	return held
}

// checkRuns verifies the runs: each is in the map under its first block,
// behind its parent in its endpoint's list, with children that know it, and
// the block counts add up within the capacity.
func checkRuns(t *testing.T, x *Index) {
	t.Helper()
	starts, total := 0, 0
	for ep, e := range x.mu.endpoints {
		if e == nil {
			continue
		}
		rs := &e.runs
		if !rs.on && rs.list.Len() > 0 {
			t.Fatalf("endpoint %d holds %d runs while not in run mode", ep, rs.list.Len())
		}
		if rs.on && x.groupSharesLocked(ep) {
			t.Fatalf("endpoint %d holds runs in a group whose Shared tier holds blocks", ep)
		}
		pos := map[*run]int{}
		blocks := 0
		for n := rs.list.Front(); n != 0; n = rs.list.Next(n) {
			r := *rs.list.Value(n)
			if r.node != n || int(r.endpoint) != ep || len(r.hashes) == 0 {
				t.Fatalf("endpoint %d: run at node %d names node %d, endpoint %d, %d blocks", ep, n, r.node, r.endpoint, len(r.hashes))
			}
			if p := r.parent; p != nil {
				if _, ahead := pos[p]; !ahead || p.children[r.at] != r {
					t.Fatalf("endpoint %d: run %x not behind its parent, or unknown to it", ep, r.hashes[0])
				}
			}
			if !slices.Contains(x.mu.runStarts[r.hashes[0]], r) {
				t.Fatalf("endpoint %d: run %x missing from the map", ep, r.hashes[0])
			}
			pos[r] = len(pos)
			blocks += len(r.hashes)
		}
		if blocks != rs.blocks || blocks > runBudget(e) {
			t.Fatalf("endpoint %d: runs hold %d blocks, counted %d, budget %d", ep, blocks, rs.blocks, runBudget(e))
		}
		starts += len(pos)
		total += blocks
	}
	n := 0
	for _, rs := range x.mu.runStarts {
		n += len(rs)
	}
	if n != starts || total != x.mu.runBlocks {
		t.Fatalf("map holds %d runs, lists %d; %d blocks counted, %d held", n, starts, x.mu.runBlocks, total)
	}
}

// refIndex is what the index must answer, held the plainest way: which
// endpoints hold each block, in which tiers. It has no bound. A group's
// Shared tier is held under the group's holder id (groupHolder), for the
// endpoints refGroups puts in it.
type refIndex map[BlockHash]map[int]*[NumTiers]bool

// refGroups is FuzzIndexAgainstReference's groups: endpoints 0 and 1 are
// one pool's replicas, 2 another's, 3 in none.
var refGroups = []int{0, 0, 1, -1}

// owner is who holds what ep records in tier.
func refOwner(ep int, tier Tier) int {
	if tier == Shared && refGroups[ep] >= 0 {
		return groupHolder(refGroups[ep])
	}
	return ep
}

func (m refIndex) record(ep int, tier Tier, hs []BlockHash) {
	ep = refOwner(ep, tier)
	for _, h := range hs {
		if m[h] == nil {
			m[h] = map[int]*[NumTiers]bool{}
		}
		if m[h][ep] == nil {
			m[h][ep] = new([NumTiers]bool)
		}
		m[h][ep][tier] = true
	}
}

func (m refIndex) remove(ep int, tier Tier, hs []BlockHash) {
	ep = refOwner(ep, tier)
	for _, h := range hs {
		if m[h] != nil && m[h][ep] != nil {
			m[h][ep][tier] = false
		}
	}
}

func (m refIndex) clear(ep int) {
	for _, eps := range m {
		delete(eps, ep)
	}
}

func (m refIndex) match(hs []BlockHash, endpoints int) ([]Match, int) {
	out := make([]Match, endpoints)
	best := 0
	for ep := range out {
	blocks:
		for _, h := range hs {
			var tiers [NumTiers]bool
			if own := m[h][ep]; own != nil {
				tiers = *own
			}
			if g := refGroups[ep]; g >= 0 && m[h][groupHolder(g)] != nil {
				tiers[Shared] = tiers[Shared] || m[h][groupHolder(g)][Shared]
			}
			for t, held := range tiers {
				if held {
					out[ep].Blocks++
					out[ep].ByTier[t]++
					continue blocks
				}
			}
			break
		}
		best = max(best, out[ep].Blocks)
	}
	return out, best
}

// FuzzIndexAgainstReference drives an index with the writes of routing
// (whole chains, the new blocks of a failed turn taken back) and of engine
// events (blocks without their prefix, removals, clears) and checks every
// lookup against refIndex. The capacity is never reached: what is held is
// exactly what was written.
func FuzzIndexAgainstReference(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42} {
		f.Add(seed, uint16(2000))
	}
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		const endpoints = 4
		tree := newChainTree(seed)
		rng := rand.New(rand.NewPCG(seed, 99))
		x := NewIndex(IndexOptions{DefaultCapacity: 1 << 20})
		for ep, g := range refGroups {
			x.SetGroup(ep, g)
		}
		x.SetTierCapacity(0, Shared, 1<<20)
		x.SetTierCapacity(2, Shared, 1<<20)
		ref := refIndex{}
		for step := range int(steps) {
			ep := rng.IntN(endpoints)
			hs := tree.chain(16)
			switch r := rng.IntN(100); {
			case r < 45:
				out := make([]Match, endpoints)
				x.MatchPrefix(hs, out)
				x.RecordChain(ep, hs)
				ref.record(ep, HBM, hs)
				if rng.IntN(4) == 0 {
					// The turn failed: its new blocks are taken back.
					x.Remove(ep, HBM, hs[out[ep].Blocks:])
					ref.remove(ep, HBM, hs[out[ep].Blocks:])
				}
			case r < 48:
				x.Record(ep, HBM, hs[len(hs)/2:])
				ref.record(ep, HBM, hs[len(hs)/2:])
			case r < 49:
				x.Record(ep, CPU, hs)
				ref.record(ep, CPU, hs)
			case r < 50 && seed%2 == 0:
				// A pool's shared store, on half the seeds: the
				// others keep their groups' Shared tiers empty.
				x.Record(ep, Shared, hs)
				ref.record(ep, Shared, hs)
			case r < 52:
				x.Remove(ep, HBM, hs[len(hs)/2:])
				ref.remove(ep, HBM, hs[len(hs)/2:])
			case r < 54:
				x.Clear(ep)
				ref.clear(ep)
			default:
				got := make([]Match, endpoints)
				best := x.MatchPrefix(hs, got)
				want, wantBest := ref.match(hs, endpoints)
				if best != wantBest || !slices.Equal(got, want) {
					t.Fatalf("step %d: MatchPrefix = %d %+v, want %d %+v", step, best, got, wantBest, want)
				}
			}
			if step%64 == 0 {
				checkInvariants(t, x)
			}
		}
		checkInvariants(t, x)
	})
}

// TestRunsEvictFromTheLeastRecentTail fills an endpoint holding runs past
// its capacity: the least recent chain loses its tail first, a chain's
// next turn stays behind its prefix, and the counts follow.
func TestRunsEvictFromTheLeastRecentTail(t *testing.T) {
	x := NewIndex(IndexOptions{DefaultCapacity: 10})
	a := []BlockHash{1, 2, 3, 4}
	b := []BlockHash{11, 12, 13, 14}
	x.RecordChain(0, a)
	x.RecordChain(0, b)
	x.RecordChain(0, append(slices.Clone(a), 5)) // a's next turn
	checkRuns(t, x)
	if !x.mu.endpoints[0].runs.on {
		t.Fatal("an endpoint written by RecordChain alone does not hold runs")
	}
	c := []BlockHash{21, 22, 23}
	x.RecordChain(0, c) // 12 blocks: b, least recent, loses 13 and 14
	checkRuns(t, x)
	out := make([]Match, 1)
	for _, tc := range []struct {
		chain []BlockHash
		want  int
	}{{append(slices.Clone(a), 5), 5}, {b, 2}, {c, 3}} {
		if got := x.MatchPrefix(tc.chain, out); got != tc.want {
			t.Errorf("MatchPrefix(%v) = %d, want %d", tc.chain, got, tc.want)
		}
	}
	if st := x.EndpointStats(0); st.Blocks[HBM] != 10 || st.Evictions != 2 {
		t.Errorf("stats %+v, want 10 blocks in HBM and 2 evictions", st)
	}
	if n := x.Len(); n != 10 {
		t.Errorf("Len = %d, want 10", n)
	}
	x.SetCapacity(0, 3)
	checkRuns(t, x)
	if got := x.MatchPrefix(c, out); got != 3 {
		t.Errorf("after shrinking, the most recent chain matches %d, want 3", got)
	}
	if got := x.MatchPrefix(a, out); got != 0 {
		t.Errorf("after shrinking, an older chain matches %d, want 0", got)
	}
}

// TestPoolReplicasHoldRuns: the replicas of one pool, as the gateway
// registers every endpoint, hold routing's chains as runs while their
// pool's Shared tier is empty; the first block one of them reports in it
// turns every replica's runs into blocks, a replica joining later
// included, and what each holds is matched as before.
func TestPoolReplicasHoldRuns(t *testing.T) {
	x := NewIndex(IndexOptions{})
	for ep := range 3 {
		x.SetGroup(ep, 0)
	}
	a, b := []BlockHash{1, 2, 3, 4}, []BlockHash{11, 12, 13}
	x.RecordChain(0, a)
	x.RecordChain(1, b)
	checkInvariants(t, x)
	if !x.mu.endpoints[0].runs.on || !x.mu.endpoints[1].runs.on {
		t.Fatal("a pool's replicas written by routing alone do not hold runs")
	}
	x.Record(2, Shared, []BlockHash{1, 2})
	checkInvariants(t, x)
	if x.mu.endpoints[0].runs.on || x.mu.endpoints[1].runs.on {
		t.Fatal("replicas still hold runs beside their pool's Shared blocks")
	}
	x.SetGroup(3, 0)
	x.RecordChain(3, b)
	checkInvariants(t, x)
	if x.mu.endpoints[3].runs.on {
		t.Fatal("a replica joining a pool with Shared blocks holds runs")
	}
	out := make([]Match, 4)
	x.MatchPrefix(a, out)
	want := []Match{
		{Blocks: 4, ByTier: [NumTiers]int{HBM: 4}},
		{Blocks: 2, ByTier: [NumTiers]int{Shared: 2}},
		{Blocks: 2, ByTier: [NumTiers]int{Shared: 2}},
		{Blocks: 2, ByTier: [NumTiers]int{Shared: 2}},
	}
	if !slices.Equal(out, want) {
		t.Errorf("MatchPrefix(a) = %+v, want %+v", out, want)
	}
}

// TestEventFedEndpointHoldsRuns: an endpoint whose engine reports its
// blocks by KV events still takes routing's chain as a run, adding nothing
// to its block lists; the events' reports of the same blocks confirm it,
// blocks reported past the run's end extend the match, a block the engine
// drops ends it there, and the runs keep only a window of the newest.
func TestEventFedEndpointHoldsRuns(t *testing.T) {
	tree := newChainTree(21)
	long := func(n int) []BlockHash {
		for {
			if hs := tree.chain(n); len(hs) == n {
				return hs
			}
		}
	}
	x := NewIndex(IndexOptions{DefaultCapacity: 400})
	x.SetGroup(0, 0)
	x.Record(0, HBM, long(16)) // an earlier prompt's events
	e := x.mu.endpoints[0]
	listed := e.tiers[HBM].list.Len()

	c := long(40)
	x.RecordRouted(0, c, 0)
	checkInvariants(t, x)
	if got := e.tiers[HBM].list.Len(); got != listed || e.runs.blocks != len(c) {
		t.Fatalf("a routed chain put %d blocks in the list and %d in runs, want 0 and %d", got-listed, e.runs.blocks, len(c))
	}
	out := make([]Match, 1)
	match := func(hs []BlockHash, want Match) {
		t.Helper()
		if x.MatchPrefix(hs, out); out[0] != want {
			t.Fatalf("MatchPrefix = %+v, want %+v", out[0], want)
		}
	}
	match(c, Match{Blocks: 40, ByTier: [NumTiers]int{HBM: 40}})

	// The engine's events report the prompt, then the next turn's new
	// blocks, before routing's record of that turn: the run and the
	// blocks behind it make one prefix.
	x.Record(0, HBM, c[:20])
	x.Record(0, HBM, c[20:])
	next := append(slices.Clone(c), BlockHash(1<<40), BlockHash(1<<40+1))
	x.Record(0, CPU, next[40:])
	match(next, Match{Blocks: 42, ByTier: [NumTiers]int{HBM: 40, CPU: 2}})

	// The engine drops a block in the middle: the prefix ends there,
	// and is whole again once the block is stored again.
	x.Remove(0, HBM, c[30:31])
	checkInvariants(t, x)
	match(next, Match{Blocks: 30, ByTier: [NumTiers]int{HBM: 30}})
	x.Record(0, HBM, c[30:31])
	match(next, Match{Blocks: 42, ByTier: [NumTiers]int{HBM: 40, CPU: 2}})

	// Routing's runs beside the engine's blocks: a window of the newest.
	for range 10 {
		x.RecordRouted(0, long(40), 0)
	}
	checkInvariants(t, x)
	if e.runs.blocks > 400/runWindow {
		t.Fatalf("runs hold %d blocks beside the events', want at most %d", e.runs.blocks, 400/runWindow)
	}
}

// TestRunsBesideBlocksAtCapacity drives endpoints holding runs and the
// engine's blocks at once, at small capacities, through every write, and
// checks the structures after each: evictions, window and trims keep
// them whole.
func TestRunsBesideBlocksAtCapacity(t *testing.T) {
	const endpoints = 3
	tree := newChainTree(17)
	rng := rand.New(rand.NewPCG(17, 18))
	x := NewIndex(IndexOptions{DefaultCapacity: 32})
	out := make([]Match, endpoints)
	for step := range 20000 {
		ep := rng.IntN(endpoints)
		hs := tree.chain(14)
		switch r := rng.IntN(100); {
		case r < 40:
			x.RecordRouted(ep, hs, 0)
		case r < 60:
			x.Record(ep, HBM, hs[len(hs)/2:])
		case r < 64:
			x.Record(ep, CPU, hs)
		case r < 74:
			x.Remove(ep, HBM, hs[rng.IntN(len(hs)+1):])
		case r < 76:
			x.Clear(ep)
		case r < 79:
			x.SetCapacity(ep, 8+rng.IntN(48))
		case r < 80 && len(hs) > 0:
			x.RecordAfter(ep, hs[0], hs[1:])
		default:
			if n := x.MatchPrefix(hs, out); n > len(hs) {
				t.Fatalf("step %d: matched %d of %d blocks", step, n, len(hs))
			}
		}
		if step%20 == 0 {
			checkInvariants(t, x)
		}
	}
	checkInvariants(t, x)
}
