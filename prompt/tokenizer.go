package prompt

import (
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Tokenizer turns text into token ids. Implementations must be safe for
// concurrent use and must not retain text, which may alias a pooled buffer.
type Tokenizer interface {
	// Encode appends the token ids of text to dst and returns the extended
	// slice.
	Encode(dst []uint32, text string) []uint32
	// Count is len(Encode(nil, text)), computed as cheaply as the
	// tokenizer can.
	Count(text string) int
}

const (
	// ApproxBytesPerToken is how many bytes of UTF-8 Approx folds into one token.
	ApproxBytesPerToken = 4
	// ApproxVocabSize bounds the token ids Approx produces.
	ApproxVocabSize = 1 << 17
)

// ApproxTokens estimates the tokens in n bytes of UTF-8 text: one per
// ApproxBytesPerToken bytes, rounded up, as Approx cuts them. It is good
// enough for costs, budgets and context windows, never for billing.
func ApproxTokens(n int) int { return (n + ApproxBytesPerToken - 1) / ApproxBytesPerToken }

// Approx is the byte-approximate tokenizer used when the gateway does not
// have the engine's tokenizer: every ApproxBytesPerToken bytes of UTF-8 (the
// last group may be shorter) become one token whose id is the xxhash64 of
// those bytes modulo ApproxVocabSize. Token counts come out near those of
// real BPE tokenizers (about four bytes per token for English and code), and
// since the chain of ids depends only on the text, prefix sharing between
// requests is preserved even though the ids are not the engine's.
//
// The simulator (accelerators/sim) tokenizes with this same rule, so against
// simulated engines Approx is exact: hashes of engine KV events and of the
// gateway's own routing agree.
type Approx struct{}

// Encode implements Tokenizer.
func (Approx) Encode(dst []uint32, text string) []uint32 {
	dst = slices.Grow(dst, ApproxTokens(len(text)))
	// Four tokens a turn into slots already there: their hashes do not
	// depend on each other, so the processor overlaps them.
	n := len(dst)
	full := len(text) / 4
	dst = dst[:n+full]
	out := dst[n:]
	i := 0
	for ; i+4 <= full; i += 4 {
		s := text[4*i : 4*i+16]
		out[i] = uint32(xxhash4(s[0:4]) % ApproxVocabSize)
		out[i+1] = uint32(xxhash4(s[4:8]) % ApproxVocabSize)
		out[i+2] = uint32(xxhash4(s[8:12]) % ApproxVocabSize)
		out[i+3] = uint32(xxhash4(s[12:16]) % ApproxVocabSize)
	}
	for ; i < full; i++ {
		out[i] = uint32(xxhash4(text[4*i:4*i+4]) % ApproxVocabSize)
	}
	text = text[4*full:]
	if len(text) > 0 {
		dst = append(dst, uint32(xxhash.Sum64String(text)%ApproxVocabSize))
	}
	return dst
}

// Count implements Tokenizer.
func (Approx) Count(text string) int { return ApproxTokens(len(text)) }

// xxhash64 primes.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime5 uint64 = 2870177450012600261
)

// xxhash4 is xxhash64 (seed 0) of the first four bytes of s, unrolled: the
// approximate tokenizer hashes every four bytes of every prompt.
func xxhash4(s string) uint64 {
	v := uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
	h := prime5 + 4
	h ^= uint64(v) * prime1
	h = bits.RotateLeft64(h, 23)*prime2 + prime3
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

// renderBufs recycles the rendered text of prompts being encoded.
var renderBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// maxPooledRender keeps one huge prompt from pinning its buffer forever.
const maxPooledRender = 4 << 20

// PromptTokenizer is a Tokenizer that renders whole prompts itself, as the
// engine does: with the model's own chat template rather than
// AppendRender's canonical one. Encode and Count hand prompts to it.
type PromptTokenizer interface {
	Tokenizer
	// EncodePrompt appends the ids of p, as the engine receives it (chat
	// template and generation prompt), to dst. key names the conversation
	// p continues, so that an implementation may encode only what is new
	// since its last prompt; "" names none. It cannot fail: where the
	// model's template cannot render p, it encodes an estimate and counts
	// the failure.
	EncodePrompt(dst []uint32, p *Prompt, key string) []uint32
	// CountPrompt is len(EncodePrompt(nil, p, "")).
	CountPrompt(p *Prompt) int
}

// Encode renders p (AppendRender) and appends the token ids tok makes of
// it to dst. tok nil means Approx; a PromptTokenizer renders p itself.
func Encode(tok Tokenizer, dst []uint32, p *Prompt) []uint32 {
	if tok == nil {
		tok = Approx{}
	}
	if pt, ok := tok.(PromptTokenizer); ok {
		return pt.EncodePrompt(dst, p, "")
	}
	buf := renderBufs.Get().(*[]byte)
	*buf = AppendRender((*buf)[:0], p)
	dst = tok.Encode(dst, bytesString(*buf))
	putRender(buf)
	return dst
}

// Count is the number of tokens tok makes of p rendered; tok nil means
// Approx; a PromptTokenizer renders p itself.
func Count(tok Tokenizer, p *Prompt) int {
	if tok == nil {
		tok = Approx{}
	}
	switch t := tok.(type) {
	case PromptTokenizer:
		return t.CountPrompt(p)
	case Approx:
		return ApproxTokens(RenderedLen(p))
	}
	buf := renderBufs.Get().(*[]byte)
	*buf = AppendRender((*buf)[:0], p)
	n := tok.Count(bytesString(*buf))
	putRender(buf)
	return n
}

func putRender(buf *[]byte) {
	if cap(*buf) <= maxPooledRender {
		renderBufs.Put(buf)
	}
}

// bytesString aliases b as a string. Tokenizers are bound not to retain
// their text, so this saves a copy of the whole prompt.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Interface guards.
var _ Tokenizer = Approx{}
