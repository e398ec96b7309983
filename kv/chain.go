package kv

import "github.com/turnpike-gateway/turnpike/internal/lru"

// Closed endpoints.
//
// A chain's block hashes are chained: a block's hash names its whole prefix.
// When routing records whole chains, root first, an endpoint's HBM list
// keeps every block behind all of its ancestors (Record pushes a chain from
// its tail, so the root ends up in front, and eviction takes the back), and
// so the blocks an endpoint holds of any chain are a prefix of it. Such an
// endpoint is closed: how much of a chain it holds is found by a binary
// search, a few map lookups instead of one per block, and a next turn whose
// prefix is held and recently used is recorded by inserting its new blocks
// behind that prefix instead of moving thousands of blocks to the front.
//
// An endpoint is open when a write may have left a block without its prefix
// in front of it: a Record of blocks that need not start at a root (an
// engine's events), a Remove, a block in another tier. RecordChain checks an
// open endpoint's list again, one lookup a block, once the list has had
// twice its length in placements since the last check, so the checks cost
// at most half a lookup a placement; a Remove of a failed turn's new blocks,
// which leaves no block without its prefix, is closed again at the next
// check.
//
// Routing writes the block lists so only on the replicas of a pool whose
// Shared tier holds blocks; elsewhere it writes runs (run.go), and the
// lists hold what the engine's events and other gateways report.

// touchFraction bounds how stale a held prefix may be, in placements since it
// was last moved to the front, as a fraction of the list's capacity, for
// RecordChain to leave it where it is: a prefix placed within the last
// quarter of the capacity is kept, older ones are moved to the front again,
// so the index's order stays within a quarter of the capacity of a true LRU.
const touchFraction = 4

// closed reports whether every block e holds is held in HBM only, behind
// its whole prefix.
func (e *endpointState) closed() bool {
	for t := HBM + 1; t < NumTiers; t++ {
		if e.tiers[t].list.Len() > 0 {
			return false
		}
	}
	return !e.open
}

// markOpenLocked notes a write to endpoint's tier that may have left a block
// without its prefix.
func (x *Index) markOpenLocked(endpoint int, tier Tier) {
	if tier != HBM {
		return // the other tiers' lengths already keep the endpoint open
	}
	e := x.endpointLocked(endpoint)
	if !e.open {
		e.open = true
		e.verifyAt = e.tiers[HBM].clock
	}
}

// verifyLocked closes open endpoint e if every block of its HBM list has
// its parent ahead of it in the list, or schedules the next check.
func (x *Index) verifyLocked(endpoint int, e *endpointState) {
	l := &e.tiers[HBM]
	if l.clock < e.verifyAt {
		return
	}
	e.verifyAt = l.clock + uint64(2*l.list.Len()) + 64
	l.epoch++
	for n := l.list.Front(); n != 0; n = l.list.Next(n) {
		nd := l.list.Value(n)
		if !nd.known {
			return
		}
		if nd.parent != 0 {
			p, ok := x.holdsLocked(nd.parent, endpoint)
			if !ok || l.list.Value(p).mark != l.epoch {
				return
			}
		}
		nd.mark = l.epoch
	}
	e.open = false
}

// holdsLocked reports whether endpoint holds h in HBM, and its node.
func (x *Index) holdsLocked(h BlockHash, endpoint int) (lru.Node, bool) {
	holders := x.mu.blocks[h]
	if j := findHolder(holders, endpoint); j >= 0 && holders[j].node[HBM] != 0 {
		return holders[j].node[HBM], true
	}
	return 0, false
}

// heldPrefixLocked is how many blocks of hashes closed endpoint holds: the
// first block it does not hold, by binary search.
func (x *Index) heldPrefixLocked(hashes []BlockHash, endpoint int) int {
	n := len(hashes)
	if n == 0 {
		return 0
	}
	if _, ok := x.holdsLocked(hashes[n-1], endpoint); ok {
		return n
	}
	lo, hi := 0, n-1 // held below lo, not held at hi
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if _, ok := x.holdsLocked(hashes[mid], endpoint); ok {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// matchClosedLocked is MatchPrefix when every endpoint is closed: the holders
// of the root are read once, and each endpoint that holds the root searches
// for the rest. out holds what the runs matched.
func (x *Index) matchClosedLocked(hashes []BlockHash, out []Match) int {
	if len(hashes) == 0 {
		return 0
	}
	best := 0
	for _, hd := range x.mu.blocks[hashes[0]] {
		m := int(hd.endpoint)
		if m < 0 || m >= len(out) || hd.node[HBM] == 0 {
			continue
		}
		// Closed blocks are in HBM and a prefix of the chain: longer
		// than the runs' match, or within it.
		if n := x.heldPrefixLocked(hashes, m); n > out[m].Blocks {
			out[m].Blocks = n
			out[m].ByTier = [NumTiers]int{HBM: n}
		}
		best = max(best, out[m].Blocks)
	}
	return best
}

// RecordChain is Record of a whole chain in HBM, root first: what routing
// writes for the prompt it sends. It is held in runs (run.go), beside any
// blocks the engine's events report, unless the endpoint's pool has Shared
// blocks; then, on a closed endpoint whose held prefix of the chain was
// used recently, only the blocks past that prefix are placed, right behind
// it.
func (x *Index) RecordChain(endpoint int, hashes []BlockHash) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.endpointLocked(endpoint)
	if e.open {
		x.verifyLocked(endpoint, e)
	}
	if !e.runs.on && !x.groupSharesLocked(endpoint) {
		e.runs.on = true
	}
	if e.runs.on {
		x.recordRunsLocked(endpoint, e, hashes)
		return
	}
	if !e.closed() || len(hashes) == 0 {
		x.recordLocked(endpoint, HBM, hashes, true)
		return
	}
	l := &e.tiers[HBM]
	held := x.heldPrefixLocked(hashes, endpoint)
	if held == 0 {
		x.recordLocked(endpoint, HBM, hashes, true)
		return
	}
	anchor, _ := x.holdsLocked(hashes[held-1], endpoint)
	if l.clock-l.list.Value(anchor).seq >= uint64(l.capacity/touchFraction) {
		x.recordLocked(endpoint, HBM, hashes, true)
		return
	}
	x.insertBehindLocked(endpoint, e, anchor, hashes[held:])
}

// insertBehindLocked places hashes, the blocks of a chain past the block at
// node anchor of closed endpoint e, right behind it, and evicts beyond the
// capacity.
func (x *Index) insertBehindLocked(endpoint int, e *endpointState, anchor lru.Node, hashes []BlockHash) {
	l := &e.tiers[HBM]
	for _, h := range hashes {
		holders := x.mu.blocks[h]
		j := findHolder(holders, endpoint)
		if j >= 0 && holders[j].node[HBM] != 0 {
			// Only hashes that are not a chain, repeating one, get
			// here: the block moves behind the anchor, and the
			// endpoint is checked again.
			l.moveAfter(anchor, holders[j].node[HBM])
			anchor = holders[j].node[HBM]
			x.markOpenLocked(endpoint, HBM)
			continue
		}
		if j < 0 {
			j = len(holders)
			holders = append(x.holdersFor(holders), holder{endpoint: int32(endpoint)})
		}
		parent := l.list.Value(anchor).hash
		anchor = l.insertAfter(anchor, h)
		nd := l.list.Value(anchor)
		nd.parent, nd.known = parent, true
		holders[j].node[HBM] = anchor
		x.mu.blocks[h] = holders
	}
	x.evictLocked(endpoint, l, HBM, &e.evictions)
}

// RecordAfter is Record, in HBM, of hashes: the blocks of a chain past
// parent, a block endpoint holds. It is how another gateway's routing
// record of a turn arrives: the turn's prefix up to parent was held there.
// On a closed endpoint holding parent the blocks are placed behind it, and
// the endpoint stays closed; otherwise they are recorded as Record does.
func (x *Index) RecordAfter(endpoint int, parent BlockHash, hashes []BlockHash) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.endpointLocked(endpoint)
	if len(hashes) == 0 {
		return
	}
	if anchor, ok := x.holdsLocked(parent, endpoint); ok && e.closed() {
		x.insertBehindLocked(endpoint, e, anchor, hashes)
		return
	}
	x.recordLocked(endpoint, HBM, hashes, false)
	x.markOpenLocked(endpoint, HBM)
}

// groupedLocked reports whether endpoint is in a group.
func (x *Index) groupedLocked(endpoint int) bool {
	return endpoint < len(x.mu.groupOf) && x.mu.groupOf[endpoint] != 0
}

// groupSharesLocked reports whether endpoint is in a group whose Shared
// tier holds blocks.
func (x *Index) groupSharesLocked(endpoint int) bool {
	return x.groupedLocked(endpoint) && x.mu.groups[x.mu.groupOf[endpoint]-1].shared.list.Len() > 0
}
