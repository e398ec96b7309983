package prompt

import (
	"slices"
	"sync"
	"unsafe"
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
	ApproxVocabSize = 1 << approxVocabBits
)

// ApproxTokens estimates the tokens in n bytes of UTF-8 text: one per
// ApproxBytesPerToken bytes, rounded up, as Approx cuts them. It is good
// enough for costs, budgets and context windows, never for billing.
func ApproxTokens(n int) int { return (n + ApproxBytesPerToken - 1) / ApproxBytesPerToken }

// Approx is the byte-approximate tokenizer used when the gateway does not
// have the engine's tokenizer: every ApproxBytesPerToken bytes of UTF-8 (the
// last group may be shorter) become one token, ApproxID of those bytes.
// Token counts come out near those of real BPE tokenizers (about four bytes
// per token for English and code), and since the chain of ids depends only
// on the text, prefix sharing between requests is preserved even though the
// ids are not the engine's.
//
// The simulator (accelerators/sim) tokenizes with this same rule, so against
// simulated engines Approx is exact: hashes of engine KV events and of the
// gateway's own routing agree.
type Approx struct{}

// ApproxID is the id Approx gives a group of one to four bytes: the bytes
// as a little-endian number, and for a group shorter than four its length
// above them (so that "ab" and "ab\x00\x00" differ), multiplied by 2^64/φ,
// its top 17 bits (Fibonacci hashing: every input bit moves the top bits,
// and distinct groups of four bytes spread evenly over the ids). A cold
// prompt of 40k tokens is 40k of these, one multiplication each.
func ApproxID(group string) uint32 {
	var v uint64
	for i := range len(group) {
		v |= uint64(group[i]) << (8 * i)
	}
	if len(group) < ApproxBytesPerToken {
		v |= uint64(len(group)) << 32
	}
	return fibID(v)
}

// fibMul is 2^64/φ, rounded to odd.
const fibMul = 0x9E3779B97F4A7C15

// fibID is the top log2(ApproxVocabSize) bits of v·fibMul.
func fibID(v uint64) uint32 { return uint32((v * fibMul) >> (64 - approxVocabBits)) }

const approxVocabBits = 17

// Encode implements Tokenizer.
func (Approx) Encode(dst []uint32, text string) []uint32 {
	dst = slices.Grow(dst, ApproxTokens(len(text)))
	n := len(dst)
	full := len(text) / 4
	dst = dst[:n+full]
	out := dst[n:]
	for i := range out {
		s := text[4*i : 4*i+4]
		out[i] = fibID(uint64(uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24))
	}
	if rest := text[4*full:]; len(rest) > 0 {
		dst = append(dst, ApproxID(rest))
	}
	return dst
}

// Count implements Tokenizer.
func (Approx) Count(text string) int { return ApproxTokens(len(text)) }

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
