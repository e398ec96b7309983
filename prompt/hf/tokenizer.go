package hf

import (
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// Tokenizer is a byte-level BPE tokenizer read from a Hugging Face
// tokenizer.json: added tokens split out first, the NFC normalizer, the
// Split pre-tokenizer, the byte-level alphabet and the BPE merges, as the
// Hugging Face tokenizers library encodes. Encode adds no special tokens of
// its own (no BOS): a chat template writes those into the text.
//
// A Tokenizer is safe for concurrent use and retains no text it is given.
type Tokenizer struct {
	bpe
	split        splitter
	nfc          bool
	ignoreMerges bool
	vocab        map[string]uint32 // raw bytes → id, for ignoreMerges
	added        addedTokens
	// tokens is the raw bytes of each id, for Decode.
	tokens []string
	cache  *wordCache
}

// cacheSlots is the number of words the word cache holds.
const cacheSlots = 1 << 16

// scratchPool recycles the working memory of Encode.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Encode implements prompt.Tokenizer.
func (t *Tokenizer) Encode(dst []uint32, text string) []uint32 {
	sc := scratchPool.Get().(*scratch)
	dst = t.encode(dst, text, sc)
	putScratch(sc)
	return dst
}

// Count implements prompt.Tokenizer.
func (t *Tokenizer) Count(text string) int {
	sc := scratchPool.Get().(*scratch)
	var buf *[]uint32
	if b, ok := countBufs.Get().(*[]uint32); ok {
		buf = b
	} else {
		buf = new([]uint32)
	}
	*buf = t.encode((*buf)[:0], text, sc)
	n := len(*buf)
	if cap(*buf) <= maxPooledIDs {
		countBufs.Put(buf)
	}
	putScratch(sc)
	return n
}

var countBufs sync.Pool

// maxPooledIDs keeps a huge prompt from pinning its buffers forever.
const maxPooledIDs = 1 << 20

func putScratch(sc *scratch) {
	if cap(sc.ids) > 1<<16 || cap(sc.syms) > 1<<16 || sc.cands.Cap() > 1<<16 || cap(sc.norm) > 4<<20 {
		return
	}
	scratchPool.Put(sc)
}

func (t *Tokenizer) encode(dst []uint32, text string, sc *scratch) []uint32 {
	for len(text) > 0 {
		i, n, id := t.added.find(text)
		if i < 0 {
			return t.encodeSegment(dst, text, sc)
		}
		dst = t.encodeSegment(dst, text[:i], sc)
		dst = append(dst, id)
		text = text[i+n:]
	}
	return dst
}

// encodeSegment encodes text that holds no added token.
func (t *Tokenizer) encodeSegment(dst []uint32, text string, sc *scratch) []uint32 {
	if len(text) == 0 {
		return dst
	}
	if t.nfc {
		text = sc.normalize(text)
	}
	for i := 0; i < len(text); {
		j := t.split.next(text, i)
		dst = t.encodeWordCached(dst, text[i:j], sc)
		i = j
	}
	return dst
}

func (t *Tokenizer) encodeWordCached(dst []uint32, word string, sc *scratch) []uint32 {
	if len(word) == 1 {
		return append(dst, t.byteIDs[word[0]])
	}
	if t.ignoreMerges {
		if id, ok := t.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if len(word) > maxCachedWord {
		return t.encodeWord(dst, word, sc)
	}
	ids, h := t.cache.get(word)
	if ids != nil {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = t.encodeWord(dst, word, sc)
	t.cache.put(h, word, dst[n:])
	return dst
}

// normalize returns the NFC form of s, in the scratch buffer when it
// differs. Text that is already NFC, ASCII above all, is returned as is.
func (sc *scratch) normalize(s string) string {
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) {
		return s
	}
	// QuickSpan, unlike IsNormal, allocates nothing; past its span the
	// text may or may not be NFC, and normalizing tells.
	i += norm.NFC.QuickSpanString(s[i:])
	if i == len(s) {
		return s
	}
	// An Iter kept in the scratch allocates nothing; AppendString would.
	// The span QuickSpan vouches for may still combine with what follows,
	// so iteration starts at the last boundary inside it.
	if j := norm.NFC.LastBoundary(unsafeBytes(s[:i])); j >= 0 {
		i = j
	}
	sc.norm = append(sc.norm[:0], s[:i]...)
	sc.iter.InitString(norm.NFC, s[i:])
	for !sc.iter.Done() {
		sc.norm = append(sc.norm, sc.iter.Next()...)
	}
	return unsafeString(sc.norm)
}

// Decode is the text of ids: the bytes each token stands for, added tokens
// as written. Ids outside the vocabulary are skipped. decode(encode(s))
// is the NFC form of s.
func (t *Tokenizer) Decode(ids []uint32) string {
	var b []byte
	for _, id := range ids {
		if int(id) < len(t.tokens) {
			b = append(b, t.tokens[id]...)
		}
	}
	return string(b)
}

// VocabSize is one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID is the id of an added token or vocabulary entry given as its
// text, and whether there is one.
func (t *Tokenizer) TokenID(text string) (uint32, bool) {
	if id, ok := t.added.ids[text]; ok {
		return id, true
	}
	id, ok := t.vocab[text]
	return id, ok
}

// addedTokens finds the added tokens (special or not) in text, leftmost
// first and the longest of those starting at one place, as the Hugging
// Face library splits them out before normalizing.
type addedTokens struct {
	ids   map[string]uint32
	first [256]bool // bytes an added token starts with
	// byPrefix lists the tokens of two bytes or more by their first two,
	// longest first; single holds the tokens of one byte.
	byPrefix map[uint16][]addedToken
	single   [256]int64 // id+1, or 0
	lengths  []int      // distinct token lengths
}

type addedToken struct {
	text string
	id   uint32
}

func (a *addedTokens) add(content string, id uint32) {
	if a.ids == nil {
		a.ids = make(map[string]uint32)
		a.byPrefix = make(map[uint16][]addedToken)
	}
	a.ids[content] = id
	a.first[content[0]] = true
	if !slices.Contains(a.lengths, len(content)) {
		a.lengths = append(a.lengths, len(content))
	}
	if len(content) == 1 {
		a.single[content[0]] = int64(id) + 1
		return
	}
	k := uint16(content[0])<<8 | uint16(content[1])
	l := slices.DeleteFunc(a.byPrefix[k], func(t addedToken) bool { return t.text == content })
	l = append(l, addedToken{content, id})
	slices.SortStableFunc(l, func(x, y addedToken) int { return len(y.text) - len(x.text) })
	a.byPrefix[k] = l
}

// find returns the offset, length and id of the first added token in s,
// or -1.
func (a *addedTokens) find(s string) (int, int, uint32) {
	if len(a.ids) == 0 {
		return -1, 0, 0
	}
	for i := 0; i < len(s); i++ {
		if !a.first[s[i]] {
			continue
		}
		if i+1 < len(s) {
			for _, t := range a.byPrefix[uint16(s[i])<<8|uint16(s[i+1])] {
				if strings.HasPrefix(s[i:], t.text) {
					return i, len(t.text), t.id
				}
			}
		}
		if id := a.single[s[i]]; id != 0 {
			return i, 1, uint32(id - 1)
		}
	}
	return -1, 0, 0
}

// Interface guards.
var _ prompt.Tokenizer = (*Tokenizer)(nil)
