package hf

import (
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/turnpike-gateway/turnpike/internal/lru"
)

// Incremental encodes prompts that extend earlier ones, as an agent's
// prompt is the previous turn's plus a suffix. It keeps the token ids of
// the last prompt seen under each key (a session, a shared prefix), and
// when a new prompt under that key starts with the old one it reuses the
// old ids up to a seam and encodes only the text from the seam on.
//
// The seam is a byte offset p in the old text where the old ids have a
// token boundary, the character before p is a letter and the one at p is
// ASCII and not a letter, at least an added token's length before the old
// end. Such a p is a piece boundary of the pre-tokenizer whatever follows
// (a run of letters ends at a non-letter, and no other alternative of the
// pattern holds a letter followed by more), an NFC boundary (no
// composition has an ASCII character second), and no added token can span
// it, so encoding the prefix up to p and the rest from p gives exactly
// the ids of encoding the whole. Where the old text has no seam near its
// end, or was not NFC, the whole prompt is encoded.
//
// Memory is bounded by MaxBytes; the least recently used keys go first.
// An old prompt is recognised by the length and xxhash64 of its text, not
// a copy of it. An Incremental is safe for concurrent use; two calls under
// one key at once both succeed, one of them without the cache.
type Incremental struct {
	tok      *Tokenizer
	maxBytes int64
	overlap  int // the least distance of a seam from the old end, in bytes

	hits, misses atomic.Uint64
	mu           struct {
		sync.Mutex
		// protects the fields below
		// sessions are bounded by maxBytes, each costing its size.
		sessions *lru.Cache[string, *session]
	}
}

// session is the last prompt seen under a key.
type session struct {
	key      string
	textLen  int
	textHash uint64
	ids      []uint32
}

// sessionOverhead approximates the bytes of a session besides its ids.
const sessionOverhead = 96

// maxSeamSearch is how far before the old end a seam is looked for.
const maxSeamSearch = 4 << 10

// NewIncremental returns an Incremental over tok that keeps at most
// maxBytes of token ids and bookkeeping.
func NewIncremental(tok *Tokenizer, maxBytes int64) *Incremental {
	c := &Incremental{tok: tok, maxBytes: maxBytes, overlap: 16}
	for _, n := range tok.added.lengths {
		c.overlap = max(c.overlap, n+1)
	}
	c.mu.sessions = lru.NewCache(maxBytes, func(_ string, s *session) int64 { return s.size() })
	return c
}

// Encode appends the ids of text to dst, as c's Tokenizer would, and
// remembers them under key. An empty key remembers nothing.
func (c *Incremental) Encode(dst []uint32, key, text string) []uint32 {
	if key == "" {
		return c.tok.Encode(dst, text)
	}
	s := c.take(key)
	// One pass of the hash over text: the old prompt's length of it, then
	// the whole.
	var d xxhash.Digest
	d.Reset()
	if s != nil && len(text) >= s.textLen {
		_, _ = d.WriteString(text[:s.textLen])
		if d.Sum64() == s.textHash {
			if ids, ok := c.extend(s, text); ok {
				c.hits.Add(1)
				s.ids = ids
				dst = append(dst, ids...)
				_, _ = d.WriteString(text[s.textLen:])
				c.remember(s, len(text), d.Sum64())
				return dst
			}
		}
		d.Reset()
	}
	c.misses.Add(1)
	n := len(dst)
	dst = c.tok.Encode(dst, text)
	if !isNFC(text) {
		return dst // the ids' lengths would not add up to the text's
	}
	if s == nil {
		s = &session{key: key}
	}
	s.ids = append(s.ids[:0], dst[n:]...)
	_, _ = d.WriteString(text)
	c.remember(s, len(text), d.Sum64())
	return dst
}

// extend returns the ids of text made from s's, or false when no seam is
// found; text starts with s's text.
func (c *Incremental) extend(s *session, text string) ([]uint32, bool) {
	old := text[:s.textLen]
	p, k := c.seam(old, s.ids)
	if p < 0 {
		return nil, false
	}
	rest := text[p:]
	if !isNFC(rest) {
		return nil, false
	}
	return c.tok.Encode(s.ids[:k], rest), true
}

// seam finds a seam in old, the text whose ids are ids: its byte offset
// and the number of ids before it, or -1.
func (c *Incremental) seam(old string, ids []uint32) (int, int) {
	off := len(old)
	for k := len(ids) - 1; k > 0; k-- {
		off -= len(c.tok.tokens[ids[k]])
		if off < 0 || len(old)-off > maxSeamSearch {
			return -1, 0
		}
		if len(old)-off < c.overlap {
			continue
		}
		if b := old[off]; b < utf8.RuneSelf && asciiClass[b] != clsLetter && off > 0 {
			_, n := utf8.DecodeLastRuneInString(old[:off])
			if cl, _ := classAt(old, off-n); cl == clsLetter {
				return off, k
			}
		}
	}
	return -1, 0
}

// take removes key's session from the cache and returns it, or nil: the
// caller owns it until remember or release.
func (c *Incremental) take(key string) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, _ := c.mu.sessions.Remove(key)
	return s
}

// remember puts s back as the last prompt under its key, a text of
// textLen bytes whose xxhash64 is textHash.
func (c *Incremental) remember(s *session, textLen int, textHash uint64) {
	s.textLen, s.textHash = textLen, textHash
	size := s.size()
	if size > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Replaces the session of a concurrent call that got there first.
	c.mu.sessions.Add(s.key, s)
}

func (s *session) size() int64 {
	return int64(cap(s.ids))*4 + int64(len(s.key)) + sessionOverhead
}

// Bytes is the memory the cache holds, as it counts it: ids, keys and a
// fixed overhead a key.
func (c *Incremental) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.sessions.Cost()
}

// Len is the number of keys the cache holds.
func (c *Incremental) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.sessions.Len()
}

// Hits and Misses count the calls that reused ids and those that encoded
// the whole prompt.
func (c *Incremental) Hits() uint64   { return c.hits.Load() }
func (c *Incremental) Misses() uint64 { return c.misses.Load() }
