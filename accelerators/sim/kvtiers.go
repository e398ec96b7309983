package sim

import (
	"sync"

	"github.com/turnpike-gateway/turnpike/internal/lru"
)

// KV tiers below HBM, as vLLM's offloading connectors and LMCache keep
// them: a block evicted from HBM moves down to host memory, from there to
// local disk, and from the last local tier to a store shared by every
// replica of the pool; a block evicted from the shared store is gone. A
// prefix hit in a lower tier loads the blocks into HBM at that tier's
// bandwidth instead of recomputing them. Each tier is an LRU set of
// blocks holding their hash, parent and tokens, enough to report them in
// KV events.

// KV event media, the medium field of vLLM's BlockStored and
// BlockRemoved.
const (
	MediumGPU    = "GPU"
	MediumCPU    = "CPU"
	MediumDisk   = "DISK"
	MediumShared = "SHARED"
)

// blockTier is one tier's LRU set of blocks. It is not locked: an
// engine's own tiers belong to its loop; a SharedKV locks around its
// tier.
type blockTier struct {
	medium    string
	blockSize int
	// bandwidth is the bytes per second a block loads into HBM at.
	bandwidth float64
	capacity  int
	// slots are the blocks held, most recently used first; slot n's
	// tokens are tokens[(n-1)*blockSize:n*blockSize] (see tokensOf).
	slots  lru.List[tierSlot]
	tokens []uint32
	byHash map[uint64]lru.Node
	// victim holds the last evicted block's tokens, valid until the next
	// eviction.
	victim []uint32
}

type tierSlot struct {
	hash, parent uint64
	hasParent    bool
}

// tierBlock is a block in transit between tiers.
type tierBlock struct {
	hash, parent uint64
	hasParent    bool
	tokens       []uint32
}

func newBlockTier(medium string, capacity, blockSize int, bandwidth float64) *blockTier {
	t := &blockTier{
		medium:    medium,
		blockSize: blockSize,
		bandwidth: bandwidth,
		capacity:  capacity,
		tokens:    make([]uint32, capacity*blockSize),
		byHash:    make(map[uint64]lru.Node, capacity),
		victim:    make([]uint32, blockSize),
	}
	// A slot is only freed for the next push, so there are never more
	// than capacity nodes: their tokens fit, and puts never allocate.
	t.slots.Grow(capacity)
	return t
}

// len is the number of blocks held.
func (t *blockTier) len() int { return len(t.byHash) }

// has reports whether the tier holds hash, and marks it most recent.
func (t *blockTier) has(hash uint64) bool {
	n, ok := t.byHash[hash]
	if ok {
		t.slots.MoveToFront(n)
	}
	return ok
}

// put stores b as the most recent block. When the tier was full, the
// least recent block makes room and is returned, its tokens valid until
// the next put. A block already held is only marked most recent; added
// reports whether b is new.
func (t *blockTier) put(b tierBlock) (evicted tierBlock, hasEvicted, added bool) {
	if t.has(b.hash) {
		return tierBlock{}, false, false
	}
	if t.capacity == 0 {
		return tierBlock{}, false, false
	}
	if t.slots.Len() == t.capacity {
		n := t.slots.Back()
		copy(t.victim, t.tokensOf(n))
		s := t.slots.Remove(n)
		delete(t.byHash, s.hash)
		evicted = tierBlock{hash: s.hash, parent: s.parent, hasParent: s.hasParent, tokens: t.victim}
		hasEvicted = true
	}
	n := t.slots.PushFront(tierSlot{hash: b.hash, parent: b.parent, hasParent: b.hasParent})
	copy(t.tokensOf(n), b.tokens)
	t.byHash[b.hash] = n
	return evicted, hasEvicted, true
}

// tokensOf is where slot n's tokens are kept.
func (t *blockTier) tokensOf(n lru.Node) []uint32 {
	at := int(n-1) * t.blockSize
	return t.tokens[at : at+t.blockSize]
}

// clear empties the tier and returns the hashes it held.
func (t *blockTier) clear(dst []uint64) []uint64 {
	for n := t.slots.Back(); n != 0; n = t.slots.Prev(n) {
		dst = append(dst, t.slots.Value(n).hash)
	}
	clear(t.byHash)
	t.slots.Reset()
	return dst
}

// SharedKV is a KV store shared by the engines of one pool, in process:
// what Mooncake, LMCache's remote backend or a shared file system give a
// real fleet. Any engine configured with it offloads the blocks its own
// tiers evict into it and loads hits from it over the network. It is safe
// for concurrent use.
type SharedKV struct {
	mu   sync.Mutex
	tier *blockTier
}

// NewSharedKV returns a shared store of blocks blocks of blockSize tokens,
// loaded into HBM at bandwidth bytes per second (0:
// DefaultKVSharedBandwidth).
func NewSharedKV(blocks, blockSize int, bandwidth float64) *SharedKV {
	if bandwidth <= 0 {
		bandwidth = DefaultKVSharedBandwidth
	}
	return &SharedKV{tier: newBlockTier(MediumShared, blocks, blockSize, bandwidth)}
}

// Len is the number of blocks the store holds.
func (s *SharedKV) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tier.len()
}

func (s *SharedKV) has(hash uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tier.has(hash)
}

// put stores b; evicted's tokens are copied, since another engine may
// evict next.
func (s *SharedKV) put(b tierBlock) (evicted tierBlock, hasEvicted, added bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evicted, hasEvicted, added = s.tier.put(b)
	if hasEvicted {
		evicted.tokens = nil // the medium's removal event needs only the hash
	}
	return evicted, hasEvicted, added
}

// lowerTiers are an engine's tiers below HBM: its own, fastest first, then
// the pool's shared store.
type lowerTiers struct {
	local  []*blockTier
	shared *SharedKV
	events *eventLog
}

// demote moves b, evicted from the tier above level, into tier level and
// on down as each tier overflows.
func (lt *lowerTiers) demote(level int, b tierBlock) {
	for {
		var (
			evicted          tierBlock
			hasEvicted, add  bool
			medium           string
			blockTierIsLocal = level < len(lt.local)
		)
		switch {
		case blockTierIsLocal:
			t := lt.local[level]
			medium = t.medium
			evicted, hasEvicted, add = t.put(b)
		case lt.shared != nil:
			medium = MediumShared
			evicted, hasEvicted, add = lt.shared.put(b)
		default:
			return
		}
		if hasEvicted {
			lt.events.removedFrom(evicted.hash, medium)
		}
		if add {
			lt.events.storedIn(b.hash, b.parent, b.hasParent, b.tokens, medium)
		}
		if !hasEvicted || !blockTierIsLocal {
			return
		}
		// The victim's tokens live in the tier's scratch until its next
		// put, which is a tier further down: safe to pass on.
		b = evicted
		level++
	}
}

// lookup finds hash below HBM and returns the bandwidth it loads at.
func (lt *lowerTiers) lookup(hash uint64) (bandwidth float64, medium string, ok bool) {
	for _, t := range lt.local {
		if t.has(hash) {
			return t.bandwidth, t.medium, true
		}
	}
	if lt.shared != nil && lt.shared.has(hash) {
		return lt.shared.tier.bandwidth, MediumShared, true
	}
	return 0, "", false
}

// clearLocal empties the engine's own lower tiers (a prefix cache reset);
// the shared store belongs to the pool and stays.
func (lt *lowerTiers) clearLocal(report bool) {
	var hashes []uint64
	for _, t := range lt.local {
		hashes = t.clear(hashes[:0])
		if report {
			for _, h := range hashes {
				lt.events.removedFrom(h, t.medium)
			}
		}
	}
}
