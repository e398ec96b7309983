package kv

import (
	"slices"
	"sort"

	"github.com/turnpike-gateway/turnpike/internal/lru"
)

// Runs.
//
// Routing's records (RecordChain) are held as runs rather than one
// block-map entry and one LRU node a block. A run is a piece of a chain,
// its hashes in one slice, whose first block's parent is its parent run's
// last block (a chain's root when it has none): an endpoint's runs are a
// radix tree of the chains routing sent it, children branching at their
// parent's end. Only a run's first block is in the index's map
// (runStarts), so a cold chain of thousands of blocks is one copy of its
// hashes and one map insert, and a lookup crosses one map lookup per run
// boundary and compares the rest, a binary search since equal chained
// hashes have equal prefixes.
//
// The runs of an endpoint are kept in LRU order with their parents always
// ahead of their children, so the least recent run is a leaf and eviction
// trims it from its tail, as the block list would.
//
// The blocks the engine's KV events report (Record), and other gateways'
// records of a turn's new blocks (RecordAfter), go to the block lists of
// the same endpoint, beside its runs. A match follows the runs as far as
// they hold the chain, in HBM, and the block lists from there
// (matchRunsLocked). The events' reports confirm what routing recorded;
// once they feed an endpoint, its runs keep only the newest
// 1/runWindow of its capacity, what the engine has yet to report. A
// Remove cuts the runs at the removed blocks (trimRunsLocked) and moves
// the blocks behind a cut to the block lists. A pool's replicas
// (SetGroup) hold runs while the pool's Shared tier is empty; its first
// block turns every replica's runs into blocks (explodeLocked), since a
// replica's own blocks count ahead of the shared ones and only the block
// lists tell them apart.

// run is a piece of a chain held by one endpoint in HBM.
type run struct {
	hashes   []BlockHash
	parent   *run
	children []*run
	at       int // index of the run in parent.children
	endpoint int32
	node     lru.Node // in the endpoint's run list
	// seq is the run clock when the run was last moved to the front, or
	// its parent's when placed behind it.
	seq uint64
}

// runState is an endpoint's runs, under Index.mu.
type runState struct {
	on bool // the endpoint holds its HBM blocks as runs
	// eventFed says the engine's KV events have reported blocks of the
	// endpoint (Record): its runs keep a window of the newest.
	eventFed bool
	list     lru.List[*run]
	blocks   int    // blocks held in runs
	clock    uint64 // blocks placed, as tierList.clock
}

// runSlab sizes the pieces new runs' hashes are carved from.
const runSlab = 4096

// ownHashesLocked copies hs into room of the index's own; full slice
// expressions keep an append to one piece off the next.
func (x *Index) ownHashesLocked(hs []BlockHash) []BlockHash {
	if len(hs) > runSlab/8 {
		return slices.Clone(hs)
	}
	if cap(x.mu.hashSlab)-len(x.mu.hashSlab) < len(hs) {
		x.mu.hashSlab = make([]BlockHash, 0, runSlab)
	}
	n := len(x.mu.hashSlab)
	x.mu.hashSlab = append(x.mu.hashSlab, hs...)
	return x.mu.hashSlab[n : n+len(hs) : n+len(hs)]
}

// commonPrefix is how many leading hashes a and b share. Chained hashes
// are equal only with equal prefixes, so it is found by binary search.
func commonPrefix(a, b []BlockHash) int {
	n := min(len(a), len(b))
	if n == 0 || a[0] != b[0] {
		return 0
	}
	if a[n-1] == b[n-1] {
		return n
	}
	return sort.Search(n-1, func(i int) bool { return a[i] != b[i] })
}

// runAtLocked is endpoint's run that starts with h behind parent (nil for
// a root run), or nil.
func (x *Index) runAtLocked(h BlockHash, endpoint int, parent *run) *run {
	for _, r := range x.mu.runStarts[h] {
		if int(r.endpoint) == endpoint && r.parent == parent {
			return r
		}
	}
	return nil
}

// walkRunsLocked follows hashes down endpoint's runs: it returns how many
// leading blocks the endpoint holds, the run holding the last of them and
// how many of that run's blocks are among them, and the path from the root
// run when path is not nil.
func (x *Index) walkRunsLocked(hashes []BlockHash, endpoint int, path *[]*run) (held int, last *run, off int) {
	if len(hashes) == 0 {
		return 0, nil, 0
	}
	for r := x.runAtLocked(hashes[0], endpoint, nil); r != nil; {
		if path != nil {
			*path = append(*path, r)
		}
		k := commonPrefix(r.hashes, hashes[held:])
		held, last, off = held+k, r, k
		if k < len(r.hashes) || held == len(hashes) {
			break
		}
		r = x.runAtLocked(hashes[held], endpoint, r)
	}
	return held, last, off
}

// matchRunsLocked is MatchPrefix for the endpoints holding runs, first:
// the prefix they hold in runs is in HBM, and the block lists' match then
// extends it, looking up only the blocks past it (matchLinearLocked,
// matchClosedLocked). That is never shorter than the blocks' match alone:
// were that longer, the blocks would hold the runs' prefix too.
func (x *Index) matchRunsLocked(hashes []BlockHash, out []Match) int {
	if len(hashes) == 0 {
		return 0
	}
	best := 0
	for _, r := range x.mu.runStarts[hashes[0]] {
		m := int(r.endpoint)
		if r.parent != nil || m >= len(out) {
			continue
		}
		n, _, _ := x.walkRunsLocked(hashes, m, nil)
		out[m].Blocks = n
		out[m].ByTier[HBM] = n
		best = max(best, n)
	}
	return best
}

// recordRunsLocked is RecordChain on endpoint e holding runs.
func (x *Index) recordRunsLocked(endpoint int, e *endpointState, hashes []BlockHash) {
	rs := &e.runs
	path := x.mu.path[:0]
	held, last, off := x.walkRunsLocked(hashes, endpoint, &path)
	old := held > 0 && rs.clock-last.seq >= uint64(runBudget(e)/touchFraction)
	if held > 0 && off < len(last.hashes) && (old || held < len(hashes)) {
		// The rest of last stays where it is, behind its prefix.
		x.splitRunLocked(e, last, off)
	}
	if old {
		// An old prefix is used again: it moves to the front, root
		// first, ahead of the children it leaves behind.
		rs.clock += uint64(held)
		for i := len(path) - 1; i >= 0; i-- {
			rs.list.MoveToFront(path[i].node)
			path[i].seq = rs.clock
		}
	}
	clear(path)
	x.mu.path = path[:0]
	if held == len(hashes) {
		return
	}
	r := &run{hashes: x.ownHashesLocked(hashes[held:]), parent: last, endpoint: int32(endpoint)}
	rs.clock += uint64(len(r.hashes))
	if last == nil {
		r.seq = rs.clock
		r.node = rs.list.PushFront(r)
	} else {
		r.seq = last.seq
		r.at = len(last.children)
		last.children = append(last.children, r)
		r.node = rs.list.InsertAfter(r, last.node)
	}
	x.mu.runStarts[r.hashes[0]] = append(x.mu.runStarts[r.hashes[0]], r)
	rs.blocks += len(r.hashes)
	x.mu.runBlocks += len(r.hashes)
	x.evictRunsLocked(e)
}

// splitRunLocked cuts r after its first k blocks: the rest becomes its one
// child, right behind it, and takes its children.
func (x *Index) splitRunLocked(e *endpointState, r *run, k int) {
	tail := &run{hashes: r.hashes[k:], parent: r, children: r.children, endpoint: r.endpoint, seq: r.seq}
	for i, c := range tail.children {
		c.parent, c.at = tail, i
	}
	r.hashes = r.hashes[:k:k]
	r.children = []*run{tail}
	tail.node = e.runs.list.InsertAfter(tail, r.node)
	x.mu.runStarts[tail.hashes[0]] = append(x.mu.runStarts[tail.hashes[0]], tail)
}

// runWindow is the share of an endpoint's HBM capacity its runs may hold
// once its engine's KV events feed the index: routing's record of what
// the engine has yet to report. The rest is known from the events.
const runWindow = 8

// runBudget is how many blocks e may hold in runs: its HBM capacity, or a
// runWindow-th of it once KV events feed it.
func runBudget(e *endpointState) int {
	if !e.runs.eventFed {
		return e.tiers[HBM].capacity
	}
	return max(1, e.tiers[HBM].capacity/runWindow)
}

// evictRunsLocked trims e's least recent runs beyond its budget.
func (x *Index) evictRunsLocked(e *endpointState) {
	rs := &e.runs
	if rs.blocks == 0 {
		return
	}
	budget := runBudget(e)
	for rs.blocks > budget {
		r := *rs.list.Value(rs.list.Back())
		if len(r.children) > 0 {
			panic("kv: least recent run has children")
		}
		first := r.hashes[0]
		drop := min(len(r.hashes), rs.blocks-budget)
		r.hashes = r.hashes[:len(r.hashes)-drop]
		rs.blocks -= drop
		x.mu.runBlocks -= drop
		e.evictions += uint64(drop)
		if len(r.hashes) == 0 {
			x.dropRunLocked(e, r, first)
		}
	}
}

// dropRunLocked takes leaf run r, whose first block is first, out of e.
func (x *Index) dropRunLocked(e *endpointState, r *run, first BlockHash) {
	e.runs.list.Remove(r.node)
	if p := r.parent; p != nil {
		last := len(p.children) - 1
		p.children[r.at] = p.children[last]
		p.children[r.at].at = r.at
		p.children[last] = nil
		p.children = p.children[:last]
	}
	starts := x.mu.runStarts[first]
	i := slices.Index(starts, r)
	if i < 0 {
		panic("kv: run missing from its start")
	}
	starts[i] = starts[len(starts)-1]
	starts[len(starts)-1] = nil
	if starts = starts[:len(starts)-1]; len(starts) == 0 {
		delete(x.mu.runStarts, first)
	} else {
		x.mu.runStarts[first] = starts
	}
}

// trimRunsLocked is Remove of hashes from endpoint e's runs, in any
// place: a run holding one of them ends before it. The blocks behind a
// removed one are still held, but no longer behind their whole prefix,
// which runs cannot say: they move to the block lists, as a Record of
// them would place them, which keeps a removed block recorded again later
// in front of them. It reads every block e holds in runs, at most its
// run budget.
func (x *Index) trimRunsLocked(endpoint int, e *endpointState, hashes []BlockHash) {
	if len(hashes) == 0 {
		return
	}
	gone := func(h BlockHash) bool { return slices.Contains(hashes, h) }
	if len(hashes) > 8 {
		set := x.mu.trimSet
		if set == nil {
			set = make(map[BlockHash]struct{}, len(hashes))
			x.mu.trimSet = set
		}
		for _, h := range hashes {
			set[h] = struct{}{}
		}
		defer clear(set)
		gone = func(h BlockHash) bool { _, ok := set[h]; return ok }
	}
	moved := false
	// From the front, parents ahead: the runs behind a cut one leave
	// before the walk reaches them.
	for n := e.runs.list.Front(); n != 0; {
		r := *e.runs.list.Value(n)
		i := slices.IndexFunc(r.hashes, gone)
		if i < 0 {
			n = e.runs.list.Next(n)
			continue
		}
		for len(r.children) > 0 {
			x.unrunSubtreeLocked(endpoint, e, r.children[len(r.children)-1])
		}
		if tail := r.hashes[i+1:]; len(tail) > 0 {
			x.recordLocked(endpoint, HBM, tail, false)
		}
		moved = true
		next := e.runs.list.Next(n)
		e.runs.blocks -= len(r.hashes) - i
		x.mu.runBlocks -= len(r.hashes) - i
		if i == 0 {
			x.dropRunLocked(e, r, r.hashes[0])
		} else {
			r.hashes = r.hashes[:i:i]
		}
		n = next
	}
	if moved {
		x.markOpenLocked(endpoint, HBM)
	}
}

// unrunSubtreeLocked moves run r and every run behind it from e's runs to
// its HBM block list.
func (x *Index) unrunSubtreeLocked(endpoint int, e *endpointState, r *run) {
	for len(r.children) > 0 {
		x.unrunSubtreeLocked(endpoint, e, r.children[len(r.children)-1])
	}
	x.recordLocked(endpoint, HBM, r.hashes, false)
	e.runs.blocks -= len(r.hashes)
	x.mu.runBlocks -= len(r.hashes)
	x.dropRunLocked(e, r, r.hashes[0])
}

// removeRunLocked is Remove of hashes from endpoint e's runs, when hashes
// are exactly one leaf run, as RemoveRouted takes back a turn's new blocks.
// It reports false, changing nothing, otherwise.
func (x *Index) removeRunLocked(endpoint int, e *endpointState, hashes []BlockHash) bool {
	if len(hashes) == 0 {
		return true
	}
	for _, r := range x.mu.runStarts[hashes[0]] {
		if int(r.endpoint) != endpoint {
			continue
		}
		if len(r.children) > 0 || !slices.Equal(r.hashes, hashes) {
			return false
		}
		e.runs.blocks -= len(r.hashes)
		x.mu.runBlocks -= len(r.hashes)
		x.dropRunLocked(e, r, hashes[0])
		return true
	}
	// hashes[0] may be inside a run, or held nowhere: only a walk from
	// the chain's root could tell, and the caller has none.
	return false
}

// explodeLocked turns endpoint e's runs into blocks in its HBM list, in
// the same order, parents ahead, and leaves it closed.
func (x *Index) explodeLocked(endpoint int, e *endpointState) {
	rs := &e.runs
	if !rs.on {
		return
	}
	rs.on = false
	hadBlocks := !e.holdsNoBlocks()
	l := &e.tiers[HBM]
	l.list.Grow(rs.blocks)
	for n := rs.list.Back(); n != 0; n = rs.list.Back() {
		r := *rs.list.Value(n)
		var parent BlockHash
		if r.parent != nil {
			parent = r.parent.hashes[len(r.parent.hashes)-1]
		}
		for i := len(r.hashes) - 1; i >= 0; i-- {
			h := r.hashes[i]
			holders := x.mu.blocks[h]
			var nn lru.Node
			switch j := findHolder(holders, endpoint); {
			case j >= 0 && holders[j].node[HBM] != 0:
				// The engine's events reported it too.
				nn = holders[j].node[HBM]
				l.moveToFront(nn)
			case j >= 0:
				nn = l.pushFront(h)
				holders[j].node[HBM] = nn
			default:
				holders = append(x.holdersFor(holders), holder{endpoint: int32(endpoint)})
				nn = l.pushFront(h)
				holders[len(holders)-1].node[HBM] = nn
				x.mu.blocks[h] = holders
			}
			nd := l.list.Value(nn)
			nd.parent, nd.known = parent, true
			if i > 0 {
				nd.parent = r.hashes[i-1]
			}
		}
		x.mu.runBlocks -= len(r.hashes)
		r.children = nil
		x.dropRunLocked(e, r, r.hashes[0])
	}
	rs.blocks = 0
	rs.list.Reset()
	x.evictLocked(endpoint, l, HBM, &e.evictions)
	if hadBlocks {
		// Blocks recorded before, without their prefix, may now
		// sit ahead of it.
		x.markOpenLocked(endpoint, HBM)
	}
}

// clearRunsLocked forgets endpoint e's runs.
func (x *Index) clearRunsLocked(e *endpointState) {
	rs := &e.runs
	for n := rs.list.Back(); n != 0; n = rs.list.Back() {
		r := *rs.list.Value(n)
		x.mu.runBlocks -= len(r.hashes)
		r.children = nil
		x.dropRunLocked(e, r, r.hashes[0])
	}
	rs.blocks = 0
	rs.list.Reset()
	rs.on = false
}
