package hf

import (
	"golang.org/x/text/unicode/norm"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/turnpike-gateway/turnpike/internal/heap"
)

// byteToRune is the byte-level alphabet of GPT-2 style tokenizers: the
// printable bytes stand for themselves and the rest are moved to U+0100
// onwards, so every byte is one visible character of the vocabulary.
var byteToRune, runeToByte = func() (b2r [256]rune, r2b map[rune]byte) {
	r2b = make(map[rune]byte, 256)
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// bpe is the merge table of a byte-level BPE model.
type bpe struct {
	// merges maps a pair of token ids, left<<32|right, to the rank of
	// their merge (its line in the merges list) <<32 | the merged id.
	merges map[uint64]uint64
	// byteIDs is the token of each single byte.
	byteIDs [256]uint32
}

const noRank = ^uint32(0)

func (m *bpe) pair(left, right uint32) (rank, id uint32) {
	v, ok := m.merges[uint64(left)<<32|uint64(right)]
	if !ok {
		return noRank, 0
	}
	return uint32(v >> 32), uint32(v)
}

// heapThreshold is the word length in bytes from which encodeWord keeps
// its candidate merges in a heap rather than rescanning them: rescanning
// is quicker for the short words of ordinary text but quadratic.
var heapThreshold = 96

// scratch is the per-call working memory of encodeWord.
type scratch struct {
	ids   []uint32
	ranks []uint32
	syms  []symbol
	cands heap.Heap[uint32, candidate] // by rank, then pos
	norm  []byte
	iter  norm.Iter
}

// encodeWord appends the BPE tokens of word to dst: starting from its
// bytes, the adjacent pair with the lowest merge rank is merged, the
// leftmost first among equals, until no pair has a merge.
func (m *bpe) encodeWord(dst []uint32, word string, sc *scratch) []uint32 {
	if len(word) == 1 {
		return append(dst, m.byteIDs[word[0]])
	}
	if len(word) >= heapThreshold {
		return m.encodeLong(dst, word, sc)
	}
	ids := sc.ids[:0]
	for i := 0; i < len(word); i++ {
		ids = append(ids, m.byteIDs[word[i]])
	}
	// ranks[k] is the rank of merging ids[k] and ids[k+1].
	ranks := sc.ranks[:0]
	for k := 0; k+1 < len(ids); k++ {
		r, _ := m.pair(ids[k], ids[k+1])
		ranks = append(ranks, r)
	}
	for len(ids) > 1 {
		best, bk := noRank, -1
		for k, r := range ranks {
			if r < best {
				best, bk = r, k
			}
		}
		if bk < 0 {
			break
		}
		_, id := m.pair(ids[bk], ids[bk+1])
		ids[bk] = id
		ids = append(ids[:bk+1], ids[bk+2:]...)
		ranks = append(ranks[:bk], ranks[bk+1:]...)
		if bk > 0 {
			ranks[bk-1], _ = m.pair(ids[bk-1], ids[bk])
		}
		if bk < len(ranks) {
			ranks[bk], _ = m.pair(ids[bk], ids[bk+1])
		}
	}
	sc.ids, sc.ranks = ids, ranks
	return append(dst, ids...)
}

// symbol is one token of a long word being merged, in a linked list.
type symbol struct {
	id         uint32
	prev, next int32 // -1 at the ends
}

// candidate is a possible merge of the symbol at pos with its successor,
// valid while their ids are still left and right. Candidates come out of
// the heap by the merge's rank, the leftmost among equals.
type candidate struct {
	pos         int32
	left, right uint32
}

// encodeLong is encodeWord in O(n log n), for long words.
func (m *bpe) encodeLong(dst []uint32, word string, sc *scratch) []uint32 {
	syms := sc.syms[:0]
	for i := 0; i < len(word); i++ {
		syms = append(syms, symbol{id: m.byteIDs[word[i]], prev: int32(i - 1), next: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	h := &sc.cands
	h.Reset()
	push := func(pos int32) {
		nx := syms[pos].next
		if nx < 0 {
			return
		}
		r, _ := m.pair(syms[pos].id, syms[nx].id)
		if r == noRank {
			return
		}
		h.Push(candidate{pos: pos, left: syms[pos].id, right: syms[nx].id}, r, uint64(pos))
	}
	for i := range syms {
		push(int32(i))
	}
	for h.Len() > 0 {
		c := h.Pop()
		s := &syms[c.pos]
		if s.id != c.left || s.next < 0 || syms[s.next].id != c.right {
			continue // stale: one side has merged since
		}
		_, id := m.pair(c.left, c.right)
		gone := s.next
		s.id = id
		s.next = syms[gone].next
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		syms[gone].id = noRank
		if s.prev >= 0 {
			push(s.prev)
		}
		push(c.pos)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.syms = syms
	return dst
}

// wordCache remembers the tokens of recent words. It is two-way set
// associative: a word's hash picks a pair of slots and a newer word
// evicts an older one, so its size is fixed and lookups take no lock.
// Entries are immutable.
type wordCache struct {
	slots []atomic.Pointer[cacheEntry]
	mask  uint64
}

// cacheEntry holds its word and ids inline, in one allocation, so a
// lookup touches one or two cache lines rather than chasing pointers.
type cacheEntry struct {
	wordLen, idsLen uint8
	ids             [maxCachedIDs]uint32
	word            [maxCachedWord]byte
}

// maxCachedWord is the longest word, in bytes, the cache keeps, and
// maxCachedIDs the most tokens.
const (
	maxCachedWord = 48
	maxCachedIDs  = 12
)

func newWordCache(slots int) *wordCache {
	n := 1
	for n < slots {
		n <<= 1
	}
	return &wordCache{slots: make([]atomic.Pointer[cacheEntry], n), mask: uint64(n - 1)}
}

func (c *wordCache) get(word string) ([]uint32, uint64) {
	h := xxhash.Sum64String(word)
	i := h & c.mask
	if e := c.slots[i].Load(); e != nil && string(e.word[:e.wordLen]) == word {
		return e.ids[:e.idsLen], h
	}
	if e := c.slots[i^1].Load(); e != nil && string(e.word[:e.wordLen]) == word {
		return e.ids[:e.idsLen], h
	}
	return nil, h
}

// put stores a word in the empty one of its two slots, else in the one
// its hash picks, so three words, not two, must meet to evict each other.
func (c *wordCache) put(h uint64, word string, ids []uint32) {
	i := h & c.mask
	if c.slots[i].Load() != nil && c.slots[i^1].Load() == nil || h>>63 == 1 {
		i ^= 1
	}
	if len(word) > maxCachedWord || len(ids) > maxCachedIDs {
		return
	}
	e := &cacheEntry{wordLen: uint8(len(word)), idsLen: uint8(len(ids))}
	copy(e.word[:], word)
	copy(e.ids[:], ids)
	c.slots[i].Store(e)
}
