package sim

import "github.com/turnpike-gateway/turnpike/internal/lru"

// kvCache is the paged KV cache with prefix caching, modelled on vLLM's
// block pool: fixed-size blocks, full blocks keyed by their chained
// BlockHash, reference counts while sequences use them, and LRU eviction
// of cached blocks no sequence references. It is owned by the engine loop
// and never locked.
type kvCache struct {
	blockSize int
	blocks    []kvBlock
	// free holds blocks that carry no cached content, used first.
	free []int32
	// byHash finds a cached block by its hash.
	byHash map[uint64]int32
	// lru holds the ids of the cached blocks with ref 0, most recently
	// released first.
	lru lru.List[int32]
	// used counts blocks with ref > 0 (vLLM's KV cache usage).
	used int
	// events, when not nil, records stores and removals for publishing.
	events *eventLog
	// tokens holds each cached block's tokens, block i at
	// tokens[i*blockSize:], for the tiers below to report.
	tokens []uint32
	// lower are the tiers evicted blocks move down to; none by default.
	lower lowerTiers
}

type kvBlock struct {
	hash, parent uint64
	hasParent    bool
	ref          int32
	cached       bool     // hash is valid and byHash points here
	node         lru.Node // in the LRU; 0 when not there
}

func newKVCache(numBlocks, blockSize int, events *eventLog) *kvCache {
	c := &kvCache{
		blockSize: blockSize,
		blocks:    make([]kvBlock, numBlocks),
		free:      make([]int32, numBlocks),
		byHash:    make(map[uint64]int32, numBlocks),
		events:    events,
		tokens:    make([]uint32, numBlocks*blockSize),
		lower:     lowerTiers{events: events},
	}
	for i := range c.free {
		// Pop from the end hands out block 0 first.
		c.free[i] = int32(numBlocks - 1 - i)
	}
	c.lru.Grow(numBlocks) // releases never allocate
	return c
}

// available is how many blocks can be allocated now, evicting if needed.
func (c *kvCache) available() int { return len(c.free) + c.lru.Len() }

// usage is the fraction of blocks referenced by running sequences.
func (c *kvCache) usage() float64 {
	if len(c.blocks) == 0 {
		return 0
	}
	return float64(c.used) / float64(len(c.blocks))
}

// alloc takes a free block, or evicts the least recently used cached one.
// The caller has checked available.
func (c *kvCache) alloc() int32 {
	var id int32
	if n := len(c.free); n > 0 {
		id = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		n := c.lru.Back()
		if n == 0 {
			panic("sim: kv cache alloc with no available block")
		}
		id = c.lru.Remove(n)
		b := &c.blocks[id]
		b.node = 0
		delete(c.byHash, b.hash)
		b.cached = false
		c.events.removed(b.hash)
		c.lower.demote(0, tierBlock{hash: b.hash, parent: b.parent, hasParent: b.hasParent,
			tokens: c.tokens[int(id)*c.blockSize : (int(id)+1)*c.blockSize]})
	}
	c.blocks[id].ref = 1
	c.used++
	return id
}

// touch takes a reference on a cached block found by a prefix lookup.
func (c *kvCache) touch(id int32) {
	b := &c.blocks[id]
	if b.node != 0 {
		c.lru.Remove(b.node)
		b.node = 0
	}
	if b.ref == 0 {
		c.used++
	}
	b.ref++
}

// release drops a reference. A block nobody references goes to the front
// of the LRU if it holds cached content, otherwise back to the free list.
func (c *kvCache) release(id int32) {
	b := &c.blocks[id]
	b.ref--
	switch {
	case b.ref > 0:
		return
	case b.ref < 0:
		panic("sim: kv block released more often than taken")
	}
	c.used--
	if b.cached {
		b.node = c.lru.PushFront(id)
	} else {
		c.free = append(c.free, id)
	}
}

// store makes a full block findable by hash; parent and tokens are what it
// was computed from. It reports false when another block already holds the
// same content (two sequences computed the same prefix at once); the
// duplicate stays uncached, as in vLLM.
func (c *kvCache) store(id int32, hash, parent uint64, hasParent bool, tokens []uint32) bool {
	if _, dup := c.byHash[hash]; dup {
		return false
	}
	b := &c.blocks[id]
	b.hash, b.parent, b.hasParent, b.cached = hash, parent, hasParent, true
	copy(c.tokens[int(id)*c.blockSize:(int(id)+1)*c.blockSize], tokens)
	c.byHash[hash] = id
	return true
}

// lookup returns the cached block holding hash.
func (c *kvCache) lookup(hash uint64) (int32, bool) {
	id, ok := c.byHash[hash]
	return id, ok
}

// evictUnreferenced drops every cached block no sequence references, and
// every block of the engine's own lower tiers (a prefix cache reset), and
// reports whether the whole cache is now empty.
func (c *kvCache) evictUnreferenced() (all bool) {
	c.lower.clearLocal(c.used > 0)
	for c.lru.Len() > 0 {
		id := c.lru.Remove(c.lru.Back())
		b := &c.blocks[id]
		b.node = 0
		delete(c.byHash, b.hash)
		b.cached = false
		c.free = append(c.free, id)
		if c.used > 0 {
			c.events.removed(b.hash)
		}
	}
	return c.used == 0
}
