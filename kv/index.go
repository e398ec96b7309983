package kv

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/turnpike-gateway/turnpike/internal/lru"
)

// Tier is where an endpoint holds a block, fastest first.
type Tier uint8

const (
	// HBM is accelerator memory: a hit costs nothing.
	HBM Tier = iota
	// CPU is host memory the engine offloads to: a hit costs a transfer.
	CPU
	// Disk is local disk the engine offloads to.
	Disk
	// Shared is a KV store shared between engines, reached over the network.
	Shared

	// NumTiers is the number of tiers.
	NumTiers = 4
)

var tierNames = [NumTiers]string{"hbm", "cpu", "disk", "shared"}

func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// ParseTier parses the name String returns, case-insensitively.
func ParseTier(s string) (Tier, error) {
	for i, n := range tierNames {
		if strings.EqualFold(s, n) {
			return Tier(i), nil
		}
	}
	return 0, fmt.Errorf("kv: unknown tier %q", s)
}

// TierWeights values a cached block by the tier it is found in, relative to a
// block in HBM; a miss is worth 0.
type TierWeights [NumTiers]float64

// DefaultTierWeights are the weights an affinity scorer starts from.
var DefaultTierWeights = TierWeights{HBM: 1.0, CPU: 0.8, Disk: 0.5, Shared: 0.4}

// Match is what one endpoint holds of a prompt's chain.
type Match struct {
	// Blocks is the length, in blocks, of the longest prefix of the chain the
	// endpoint holds in any tier.
	Blocks int
	// ByTier counts the blocks of that prefix by the fastest tier holding
	// each; the counts sum to Blocks.
	ByTier [NumTiers]int
	// Stale reports that the endpoint's entries may be wrong (see
	// Index.SetStale); a scorer should trust them less.
	Stale bool
}

// Weighted is the tier-weighted number of blocks matched.
func (m *Match) Weighted(w *TierWeights) float64 {
	var s float64
	for t, n := range m.ByTier {
		s += float64(n) * w[t]
	}
	return s
}

// DefaultCapacity is the number of blocks an endpoint holds per tier until
// SetCapacity says otherwise: 64Ki blocks, a 1M-token cache at 16 tokens a block.
const DefaultCapacity = 1 << 16

// DefaultMaxCapacity is IndexOptions.MaxCapacity's default: 128Ki blocks,
// a 2M-token cache at 16 tokens a block, more than an engine on one
// accelerator reports; at about 160 bytes a block held through KV events
// (docs/memory.md), 20 MiB per endpoint and tier.
const DefaultMaxCapacity = 1 << 17

// MaxEndpoints bounds endpoint ids: they index slices, so an id must be small.
const MaxEndpoints = 1 << 16

// IndexOptions configures an Index.
type IndexOptions struct {
	// DefaultCapacity is the number of blocks per endpoint and tier before
	// SetCapacity is called. Zero means DefaultCapacity.
	DefaultCapacity int
	// MaxCapacity bounds every capacity, in blocks per endpoint and
	// tier, whatever SetCapacity is given (an engine's reported KV
	// capacity), so that the index's memory is bounded by configuration:
	// endpoints × tiers × MaxCapacity blocks. Zero means
	// DefaultMaxCapacity; negative, no bound.
	MaxCapacity int
}

// Index records which endpoint holds which block in which tier. Endpoints
// are the caller's small, stable endpoint ids (0 ≤ id < MaxEndpoints); each
// endpoint's tiers are bounded LRU sets, so the index forgets what the engine
// must have evicted. An Index is safe for concurrent use.
type Index struct {
	defaultCapacity int
	maxCapacity     int // 0: none

	// Counters for the hit ratio, written under the read lock.
	lookups       atomic.Uint64
	lookupBlocks  atomic.Uint64
	matchedBlocks atomic.Uint64

	// peers, when set, shares the records of RecordRouted and
	// RemoveRouted with the other gateways (see Peers).
	peers atomic.Pointer[Peers]

	mu struct {
		sync.RWMutex
		// protects the fields below
		blocks    map[BlockHash][]holder
		endpoints []*endpointState
		// groupOf[e] is endpoint e's group + 1, 0 when it has none;
		// groups[g] holds group g's members and shared tier.
		groupOf []int32
		groups  []*groupState
		// slab hands out room for the first holder of new blocks, so
		// that a new chain of thousands of blocks costs a few
		// allocations rather than one a block.
		slab []holder
		// runStarts holds every run (see run.go) under its first block;
		// runBlocks counts the blocks of all runs. hashSlab and path are
		// scratch of RecordChain.
		runStarts map[BlockHash][]*run
		runBlocks int
		hashSlab  []BlockHash
		path      []*run
		// trimSet is scratch of Remove on runs.
		trimSet map[BlockHash]struct{}
	}
}

// groupState is a group of endpoints sharing one Shared tier, held in the
// block map under the pseudo endpoint groupHolder(g).
type groupState struct {
	members   []int32
	shared    tierList
	evictions uint64
}

// groupHolder is the holder id of group g's shared tier: negative, apart
// from every endpoint id.
func groupHolder(g int) int { return -(g + 1) }

// holder is one endpoint's hold on a block: per tier, the index of the
// block's node in that tier's list; zero means not held.
type holder struct {
	endpoint int32
	node     [NumTiers]lru.Node
}

func (h *holder) fastest() Tier {
	for t, n := range h.node {
		if n != 0 {
			return Tier(t)
		}
	}
	panic("kv: holder holds nothing")
}

func (h *holder) empty() bool { return h.node == [NumTiers]lru.Node{} }

type endpointState struct {
	stale atomic.Bool
	// engineRemovals counts the engine's reports of blocks it dropped
	// (BlockRemoved, AllBlocksCleared), for EngineRemovals.
	engineRemovals atomic.Uint64
	tiers          [NumTiers]tierList
	evictions      uint64 // under Index.mu (write)
	// open says a write may have left a block in HBM without its whole
	// prefix in front of it (see closed); verifyAt is the HBM clock at
	// which RecordChain checks again. Under Index.mu.
	open     bool
	verifyAt uint64
	// runs holds the endpoint's HBM blocks while it is written by
	// routing alone (see run.go). Under Index.mu.
	runs runState
}

// holdsNoBlocks reports whether e holds nothing in its block lists.
func (e *endpointState) holdsNoBlocks() bool {
	for t := range e.tiers {
		if e.tiers[t].list.Len() > 0 {
			return false
		}
	}
	return true
}

// NewIndex returns an empty index.
func NewIndex(opts IndexOptions) *Index {
	x := &Index{defaultCapacity: opts.DefaultCapacity, maxCapacity: opts.MaxCapacity}
	if x.defaultCapacity <= 0 {
		x.defaultCapacity = DefaultCapacity
	}
	switch {
	case x.maxCapacity == 0:
		x.maxCapacity = DefaultMaxCapacity
	case x.maxCapacity < 0:
		x.maxCapacity = 0
	}
	x.defaultCapacity = x.capped(x.defaultCapacity)
	x.mu.blocks = make(map[BlockHash][]holder)
	x.mu.runStarts = make(map[BlockHash][]*run)
	return x
}

// endpointLocked returns the state of endpoint, creating it.
func (x *Index) endpointLocked(endpoint int) *endpointState {
	if endpoint < 0 || endpoint >= MaxEndpoints {
		panic(fmt.Sprintf("kv: endpoint id %d out of range [0, %d)", endpoint, MaxEndpoints))
	}
	for len(x.mu.endpoints) <= endpoint {
		x.mu.endpoints = append(x.mu.endpoints, nil)
	}
	e := x.mu.endpoints[endpoint]
	if e == nil {
		e = &endpointState{}
		for t := range e.tiers {
			e.tiers[t].init(x.defaultCapacity)
		}
		x.mu.endpoints[endpoint] = e
	}
	return e
}

// SetGroup puts endpoint in group (0 ≤ group < MaxEndpoints), or in none
// when group < 0. The endpoints of a group are the replicas of one pool:
// they share one Shared tier, so a block any of them reports in the Shared
// tier is held, for matching, by every member, including members that join
// later or never report it.
func (x *Index) SetGroup(endpoint, group int) {
	if group >= MaxEndpoints {
		panic(fmt.Sprintf("kv: group id %d out of range [0, %d)", group, MaxEndpoints))
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.endpointLocked(endpoint)
	for len(x.mu.groupOf) <= endpoint {
		x.mu.groupOf = append(x.mu.groupOf, 0)
	}
	if old := int(x.mu.groupOf[endpoint]) - 1; old >= 0 {
		g := x.mu.groups[old]
		for i, m := range g.members {
			if int(m) == endpoint {
				g.members = append(g.members[:i], g.members[i+1:]...)
				break
			}
		}
	}
	x.mu.groupOf[endpoint] = 0
	if group < 0 {
		return
	}
	for len(x.mu.groups) <= group {
		gs := &groupState{}
		gs.shared.init(x.defaultCapacity)
		x.mu.groups = append(x.mu.groups, gs)
	}
	g := x.mu.groups[group]
	g.members = append(g.members, int32(endpoint))
	x.mu.groupOf[endpoint] = int32(group + 1)
	if g.shared.list.Len() > 0 {
		x.explodeGroupLocked(group)
	}
}

// explodeGroupLocked turns the runs of group's members into blocks: a
// member's own blocks count ahead of the group's Shared ones, and only the
// block lists tell them apart. A group whose Shared tier is empty, as
// without an engine that reports one, leaves its members' runs alone.
func (x *Index) explodeGroupLocked(group int) {
	for _, m := range x.mu.groups[group].members {
		x.explodeLocked(int(m), x.mu.endpoints[m])
	}
}

// tierLocked resolves where endpoint's blocks in tier are kept: the holder
// id, its LRU and its eviction counter. An endpoint's Shared tier is its
// group's when it has one.
func (x *Index) tierLocked(endpoint int, tier Tier) (owner int, l *tierList, evictions *uint64) {
	e := x.endpointLocked(endpoint)
	if tier == Shared && endpoint < len(x.mu.groupOf) && x.mu.groupOf[endpoint] != 0 {
		g := int(x.mu.groupOf[endpoint]) - 1
		gs := x.mu.groups[g]
		return groupHolder(g), &gs.shared, &gs.evictions
	}
	return endpoint, &e.tiers[tier], &e.evictions
}

// SetCapacity bounds endpoint to blocks blocks in every tier of its own,
// evicting the least recently used beyond it; a group's Shared tier is
// bounded by SetTierCapacity only. Zero or less restores the default;
// more than the index's MaxCapacity is cut to it. The
// caller takes it from the engine's real KV capacity (vllm:cache_config_info's
// num_gpu_blocks) when known.
func (x *Index) SetCapacity(endpoint, blocks int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for t := range NumTiers {
		if owner, _, _ := x.tierLocked(endpoint, Tier(t)); owner != endpoint {
			continue
		}
		x.setCapacityLocked(endpoint, Tier(t), blocks)
	}
}

// SetTierCapacity is SetCapacity for one tier; for the Shared tier of an
// endpoint in a group, it bounds the group's.
func (x *Index) SetTierCapacity(endpoint int, tier Tier, blocks int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.setCapacityLocked(endpoint, tier, blocks)
}

// capped is blocks cut to the index's MaxCapacity.
func (x *Index) capped(blocks int) int {
	if x.maxCapacity > 0 {
		return min(blocks, x.maxCapacity)
	}
	return blocks
}

func (x *Index) setCapacityLocked(endpoint int, tier Tier, blocks int) {
	if blocks <= 0 {
		blocks = x.defaultCapacity
	}
	blocks = x.capped(blocks)
	owner, l, ev := x.tierLocked(endpoint, tier)
	l.capacity = blocks
	x.evictLocked(owner, l, tier, ev)
	if e := x.mu.endpoints[endpoint]; owner == endpoint && tier == HBM {
		x.evictRunsLocked(e)
	}
}

// Record notes that endpoint holds hashes, a prompt's chain, in tier, and
// marks them most recently used. The first block ends up the most recent, so
// that as with the engines' own eviction a chain is forgotten from its tail.
//
// Record is how the engine's KV events report the blocks it stored: from
// the first, the endpoint's blocks take the place of all but the newest of
// routing's runs (runWindow).
func (x *Index) Record(endpoint int, tier Tier, hashes []BlockHash) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.recordBlocksLocked(endpoint, tier, hashes)
	if e := x.endpointLocked(endpoint); !e.runs.eventFed {
		e.runs.eventFed = true
		x.evictRunsLocked(e)
	}
}

// recordPeer is Record of another gateway's routing record, which leaves
// the endpoint's runs whole.
func (x *Index) recordPeer(endpoint int, hashes []BlockHash) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.recordBlocksLocked(endpoint, HBM, hashes)
}

// recordBlocksLocked is Record in the block lists.
func (x *Index) recordBlocksLocked(endpoint int, tier Tier, hashes []BlockHash) {
	if len(hashes) > 0 {
		if tier == Shared && x.groupedLocked(endpoint) {
			x.explodeGroupLocked(int(x.mu.groupOf[endpoint]) - 1)
		}
		x.recordLocked(endpoint, tier, hashes, false)
		// hashes need not start at a chain's root: an engine's event
		// names the blocks it stored, whose parents it stored before.
		x.markOpenLocked(endpoint, tier)
	}
}

// recordLocked is Record without marking the endpoint open. Each block
// notes the one before it in hashes as its parent; the first block's parent
// is the root when root says hashes is a whole chain, and unknown otherwise.
func (x *Index) recordLocked(endpoint int, tier Tier, hashes []BlockHash, root bool) {
	owner, l, ev := x.tierLocked(endpoint, tier)
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		holders := x.mu.blocks[h]
		j := findHolder(holders, owner)
		var n lru.Node
		if j >= 0 && holders[j].node[tier] != 0 {
			n = holders[j].node[tier]
			l.moveToFront(n)
		} else {
			if j < 0 {
				j = len(holders)
				holders = append(x.holdersFor(holders), holder{endpoint: int32(owner)})
			}
			n = l.pushFront(h)
			holders[j].node[tier] = n
			x.mu.blocks[h] = holders
		}
		switch nd := l.list.Value(n); {
		case i > 0:
			nd.parent, nd.known = hashes[i-1], true
		case root:
			nd.parent, nd.known = 0, true
		}
	}
	x.evictLocked(owner, l, tier, ev)
}

// RecordRouted is Record in HBM for a prompt this gateway has just routed
// to endpoint, ahead of the engine; held is how many leading blocks of
// hashes the index matched on endpoint before (Match.Blocks). When Peers
// runs on the index, the blocks past held are shared with the other
// gateways: they hold the leading ones already from an earlier turn of the
// conversation, or learn them from the engine's KV events. Records from
// engine KV events and from peers go through Record, and are not shared.
func (x *Index) RecordRouted(endpoint int, hashes []BlockHash, held int) {
	x.RecordChain(endpoint, hashes)
	p := x.peers.Load()
	if p == nil {
		return
	}
	// Whole, or past the last block held, that block first: the peers
	// place the new blocks behind it (RecordChain, RecordAfter).
	switch held = min(max(held, 0), len(hashes)); {
	case held == 0:
		p.routed(endpoint, peerRecordChain, hashes)
	case held < len(hashes):
		p.routed(endpoint, peerRecordAfter, hashes[held-1:])
	}
}

// RemoveRouted takes back what RecordRouted recorded, for a routed turn
// that failed, here and at the peers that had the record.
func (x *Index) RemoveRouted(endpoint int, hashes []BlockHash) {
	x.Remove(endpoint, HBM, hashes)
	if p := x.peers.Load(); p != nil {
		p.routed(endpoint, peerRecordRemoved, hashes)
	}
}

// Remove notes that endpoint no longer holds hashes in tier. Blocks it does
// not hold are ignored. In HBM, a Remove that is not of one whole run
// reads every block the endpoint holds in runs (trimRunsLocked): a
// routed turn's failure takes back its own run, and an engine's removals
// meet a window of runs once its events feed the endpoint. Removing from the Shared tier of an endpoint in a
// group removes from the group's.
func (x *Index) Remove(endpoint int, tier Tier, hashes []BlockHash) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.endpointLocked(endpoint)
	if tier == HBM && e.runs.list.Len() > 0 && !x.removeRunLocked(endpoint, e, hashes) {
		x.trimRunsLocked(endpoint, e, hashes)
	}
	owner, l, _ := x.tierLocked(endpoint, tier)
	if owner == endpoint && e.holdsNoBlocks() {
		return
	}
	removed := false
	for _, h := range hashes {
		holders := x.mu.blocks[h]
		j := findHolder(holders, owner)
		if j < 0 || holders[j].node[tier] == 0 {
			continue
		}
		l.list.Remove(holders[j].node[tier])
		x.unholdLocked(h, holders, j, tier)
		removed = true
	}
	if removed {
		// A removed block may be the parent of one still held.
		x.markOpenLocked(endpoint, tier)
	}
}

// Clear forgets every block of endpoint in every tier of its own; a
// group's Shared tier outlives its members' caches. Capacities and the
// stale mark are kept.
func (x *Index) Clear(endpoint int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.endpointLocked(endpoint)
	x.clearRunsLocked(e)
	for t := range NumTiers {
		l := &e.tiers[t]
		for n := l.list.Front(); n != 0; n = l.list.Next(n) {
			h := l.list.Value(n).hash
			holders := x.mu.blocks[h]
			x.unholdLocked(h, holders, findHolder(holders, endpoint), Tier(t))
		}
		l.init(l.capacity)
	}
	e.open = false
}

// evictLocked drops owner's least recently used blocks in tier, list l,
// beyond its capacity.
func (x *Index) evictLocked(owner int, l *tierList, tier Tier, evictions *uint64) {
	for l.list.Len() > l.capacity {
		n := l.list.Back()
		h := l.list.Remove(n).hash
		holders := x.mu.blocks[h]
		x.unholdLocked(h, holders, findHolder(holders, owner), tier)
		*evictions++
	}
}

// unholdLocked clears holders[j]'s hold on h in tier, whose LRU node the
// caller has already removed, and drops what is left empty.
func (x *Index) unholdLocked(h BlockHash, holders []holder, j int, tier Tier) {
	if j < 0 {
		panic("kv: LRU node without a holder")
	}
	holders[j].node[tier] = 0
	if !holders[j].empty() {
		return
	}
	last := len(holders) - 1
	holders[j] = holders[last]
	holders = holders[:last]
	if len(holders) == 0 {
		delete(x.mu.blocks, h)
		return
	}
	x.mu.blocks[h] = holders
}

// holdersFor returns holders, or room for one holder when it is empty.
func (x *Index) holdersFor(holders []holder) []holder {
	if cap(holders) > 0 {
		return holders
	}
	if len(x.mu.slab) == 0 {
		x.mu.slab = make([]holder, 512)
	}
	room := x.mu.slab[:0:1]
	x.mu.slab = x.mu.slab[1:]
	return room
}

func findHolder(holders []holder, endpoint int) int {
	for i := range holders {
		if int(holders[i].endpoint) == endpoint {
			return i
		}
	}
	return -1
}

// MatchPrefix fills out, indexed by endpoint id, with how much of the chain
// hashes each endpoint holds, and returns the longest match. Endpoints at or
// beyond len(out) are not reported. It does not allocate: it is on the
// routing hot path.
func (x *Index) MatchPrefix(hashes []BlockHash, out []Match) int {
	clear(out)
	x.mu.RLock()
	closed := true
	for _, g := range x.mu.groups {
		closed = closed && g.shared.list.Len() == 0
	}
	for i, e := range x.mu.endpoints[:min(len(out), len(x.mu.endpoints))] {
		if e != nil {
			out[i].Stale = e.stale.Load()
			closed = closed && e.closed()
		}
	}
	// The runs first: the block lists extend what they hold (run.go).
	best := 0
	if len(x.mu.runStarts) > 0 {
		best = x.matchRunsLocked(hashes, out)
	}
	if closed {
		best = max(best, x.matchClosedLocked(hashes, out))
	} else {
		best = max(best, x.matchLinearLocked(hashes, out))
	}
	x.mu.RUnlock()
	x.lookups.Add(1)
	x.lookupBlocks.Add(uint64(len(hashes)))
	x.matchedBlocks.Add(uint64(best))
	return best
}

// matchLinearLocked is MatchPrefix's walk over every block of the chain,
// for an index where a block may be held without its prefix, in another
// tier or by a group. out holds what the runs matched.
func (x *Index) matchLinearLocked(hashes []BlockHash, out []Match) int {
	// An endpoint still matches at block i only if its count is i; the walk
	// stops at the first block no such endpoint holds, or, where runs hold
	// more of the chain, goes on at the end of the nearest run match: the
	// blocks an endpoint's runs hold are not looked up. A group's shared
	// holds come second, so that an endpoint's own faster copy counts first.
	grouped := len(x.mu.groups) > 0
	for i := 0; i < len(hashes); i++ {
		h := hashes[i]
		advanced := false
		holders := x.mu.blocks[h]
		shared := false
		for k := range holders {
			hd := &holders[k]
			m := int(hd.endpoint)
			if m < 0 {
				shared = true
				continue
			}
			if m >= len(out) || out[m].Blocks != i {
				continue
			}
			out[m].Blocks++
			out[m].ByTier[hd.fastest()]++
			advanced = true
		}
		if grouped && shared {
			for k := range holders {
				if g := -int(holders[k].endpoint) - 1; g >= 0 {
					for _, m := range x.mu.groups[g].members {
						if int(m) < len(out) && out[m].Blocks == i {
							out[m].Blocks++
							out[m].ByTier[Shared]++
							advanced = true
						}
					}
				}
			}
		}
		if advanced {
			continue
		}
		next := len(hashes)
		for m := range out {
			if n := out[m].Blocks; n > i && n < next {
				next = n
			}
		}
		i = next - 1
	}
	best := 0
	for m := range out {
		best = max(best, out[m].Blocks)
	}
	return best
}

// SetStale marks endpoint's entries as possibly wrong, or trusted again. The
// event subscriber sets it when it misses events.
func (x *Index) SetStale(endpoint int, stale bool) {
	x.mu.Lock()
	e := x.endpointLocked(endpoint)
	x.mu.Unlock()
	e.stale.Store(stale)
}

// Stale reports whether endpoint's entries are marked possibly wrong.
func (x *Index) Stale(endpoint int) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if endpoint < 0 || endpoint >= len(x.mu.endpoints) || x.mu.endpoints[endpoint] == nil {
		return false
	}
	return x.mu.endpoints[endpoint].stale.Load()
}

// EngineRemovals is how many times endpoint's engine has reported, by KV
// events, blocks it dropped or its whole cache cleared: a number that
// only grows, which a caller reads twice to tell whether the engine
// evicted anything in between. Zero for an endpoint never seen.
func (x *Index) EngineRemovals(endpoint int) uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if endpoint < 0 || endpoint >= len(x.mu.endpoints) || x.mu.endpoints[endpoint] == nil {
		return 0
	}
	return x.mu.endpoints[endpoint].engineRemovals.Load()
}

// noteEngineRemoval counts one report of endpoint's engine that it
// dropped blocks (see EngineRemovals).
func (x *Index) noteEngineRemoval(endpoint int) {
	x.mu.Lock()
	e := x.endpointLocked(endpoint)
	x.mu.Unlock()
	e.engineRemovals.Add(1)
}

// Len is the number of distinct blocks held by any endpoint, where a block
// held in runs (see run.go) counts once for each endpoint holding it, and
// once more where the engine's events reported it too.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.mu.blocks) + x.mu.runBlocks
}

// IndexStats are counters for metrics. The hit ratio is
// MatchedBlocks/LookupBlocks.
type IndexStats struct {
	Blocks        int    // distinct blocks held (see Index.Len)
	Lookups       uint64 // MatchPrefix calls
	LookupBlocks  uint64 // blocks asked for
	MatchedBlocks uint64 // blocks of the longest match, summed over lookups
}

// Stats returns the index's counters.
func (x *Index) Stats() IndexStats {
	return IndexStats{
		Blocks:        x.Len(),
		Lookups:       x.lookups.Load(),
		LookupBlocks:  x.lookupBlocks.Load(),
		MatchedBlocks: x.matchedBlocks.Load(),
	}
}

// EndpointStats describe one endpoint's part of the index.
type EndpointStats struct {
	Blocks    [NumTiers]int // blocks held, per tier; in HBM, routing's runs and the events' blocks, a block both report twice
	Capacity  [NumTiers]int // bound on each of runs and blocks, per tier
	Evictions uint64        // blocks dropped for capacity
	Stale     bool
}

// EndpointStats returns endpoint's stats; an endpoint never seen has none.
func (x *Index) EndpointStats(endpoint int) EndpointStats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var s EndpointStats
	if endpoint < 0 || endpoint >= len(x.mu.endpoints) || x.mu.endpoints[endpoint] == nil {
		return s
	}
	e := x.mu.endpoints[endpoint]
	for t := range e.tiers {
		s.Blocks[t] = e.tiers[t].list.Len()
		s.Capacity[t] = e.tiers[t].capacity
	}
	s.Blocks[HBM] += e.runs.blocks
	s.Evictions = e.evictions
	if endpoint < len(x.mu.groupOf) && x.mu.groupOf[endpoint] != 0 {
		g := x.mu.groups[x.mu.groupOf[endpoint]-1]
		s.Blocks[Shared], s.Capacity[Shared] = g.shared.list.Len(), g.shared.capacity
	}
	s.Stale = e.stale.Load()
	return s
}

// tierList is an endpoint's (or a group's) blocks in one tier, most
// recently used first, with their bound. Besides the LRU order it keeps a
// block's place in its chain, and a clock of placements.
//
// clock counts the writes that place a node (push, move, insert); a node's
// seq is the clock when it was last moved to the front, or its anchor's
// when inserted behind one, so seq never increases from front to back.
type tierList struct {
	list     lru.List[lruNode]
	capacity int
	clock    uint64
	epoch    uint32 // of the marks
}

type lruNode struct {
	hash BlockHash
	// parent is the block before this one in its chain, 0 at a chain's
	// root; known says whether it is known.
	parent BlockHash
	seq    uint64
	mark   uint32 // scratch of verifyLocked
	known  bool
}

func (l *tierList) init(capacity int) {
	l.capacity = capacity
	l.list.Reset()
}

func (l *tierList) pushFront(h BlockHash) lru.Node {
	l.clock++
	return l.list.PushFront(lruNode{hash: h, seq: l.clock})
}

// insertAfter puts a new node for h right behind node at, as recent as it.
func (l *tierList) insertAfter(at lru.Node, h BlockHash) lru.Node {
	l.clock++
	return l.list.InsertAfter(lruNode{hash: h, seq: l.list.Value(at).seq}, at)
}

// moveAfter moves node n right behind node at, as recent as it.
func (l *tierList) moveAfter(at, n lru.Node) {
	if at == n {
		return
	}
	l.list.Value(n).seq = l.list.Value(at).seq
	l.list.MoveAfter(n, at)
}

func (l *tierList) moveToFront(n lru.Node) {
	l.clock++
	l.list.Value(n).seq = l.clock
	l.list.MoveToFront(n)
}
