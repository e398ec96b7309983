package kv

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// DefaultBlockSize is the number of tokens in one KV-cache block, the paged
// block size of vLLM, SGLang and the simulator.
const DefaultBlockSize = 16

// BlockHash identifies a block of tokens together with every token before it:
// it is the chained hash of the block and its parent. Two prompts share a
// BlockHash only if they share the whole prefix up to the end of that block.
type BlockHash uint64

// ToolCall is one tool call made by an assistant message.
type ToolCall struct {
	Name      string
	Arguments string // raw JSON, rendered as is
}

// Message is one chat message as the engine's chat template sees it.
type Message struct {
	Role      string
	Content   string
	ToolCalls []ToolCall // rendered for assistant messages only
}

// Prompt is a request as the engine will see it, before tokenization.
type Prompt struct {
	// Model names the model; it seeds the hash chain, so two models never share
	// blocks.
	Model string
	// Tools is the raw JSON of the request's tools array, or nil.
	Tools []byte
	// Messages is the chat. When nil, Text is hashed instead.
	Messages []Message
	// Text is the prompt of a /v1/completions request, used as is when
	// Messages is nil.
	Text string
}

// Tokenizer turns text into token ids. Tokenize appends the ids of text to dst
// and returns the extended slice. It must not retain text, which may alias a
// pooled buffer, and it must be safe for concurrent use.
type Tokenizer interface {
	Tokenize(dst []uint32, text string) []uint32
}

const (
	// ApproxBytesPerToken is how many bytes of UTF-8 ApproxTokenizer folds into one token.
	ApproxBytesPerToken = 4
	// ApproxVocabSize bounds the token ids ApproxTokenizer produces.
	ApproxVocabSize = 1 << 17
)

// ApproxTokens estimates the tokens in n bytes of UTF-8 text: one per
// ApproxBytesPerToken bytes, rounded up, as ApproxTokenizer cuts them. It is
// good enough for costs, budgets and context windows, never for billing.
func ApproxTokens(n int) int { return (n + ApproxBytesPerToken - 1) / ApproxBytesPerToken }

// ApproxTokenizer is the byte-approximate tokenizer used when the gateway does
// not have the engine's tokenizer: every ApproxBytesPerToken bytes of UTF-8
// (the last group may be shorter) become one token whose id is the xxhash64 of
// those bytes modulo ApproxVocabSize. Token counts come out near those of real
// BPE tokenizers (about four bytes per token for English and code), and since
// the chain depends only on the text, prefix sharing between requests is
// preserved even though the ids are not the engine's.
//
// The simulator (accelerators/sim) tokenizes with this same rule, so against
// simulated engines the approximate mode is exact: hashes of engine KV events
// and of the gateway's own routing agree.
type ApproxTokenizer struct{}

// Tokenize implements Tokenizer.
func (ApproxTokenizer) Tokenize(dst []uint32, text string) []uint32 {
	dst = slices.Grow(dst, (len(text)+ApproxBytesPerToken-1)/ApproxBytesPerToken)
	for len(text) >= 4 {
		dst = append(dst, uint32(xxhash4(text)%ApproxVocabSize))
		text = text[4:]
	}
	if len(text) > 0 {
		dst = append(dst, uint32(xxhash.Sum64String(text)%ApproxVocabSize))
	}
	return dst
}

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

// Hasher cuts prompts into blocks and hashes them into chains. The zero value
// is ready to use with DefaultBlockSize and ApproxTokenizer. A Hasher must not
// be changed once in use; it is safe for concurrent use.
type Hasher struct {
	// BlockSize is the number of tokens per block. Zero means DefaultBlockSize.
	// It must equal the engines' block size for engine KV events to line up.
	BlockSize int
	// Tokenizer turns the rendered prompt into token ids. Nil means
	// ApproxTokenizer.
	Tokenizer Tokenizer
}

func (h *Hasher) blockSize() int {
	if h == nil || h.BlockSize <= 0 {
		return DefaultBlockSize
	}
	return h.BlockSize
}

func (h *Hasher) tokenizer() Tokenizer {
	if h == nil || h.Tokenizer == nil {
		return ApproxTokenizer{}
	}
	return h.Tokenizer
}

// ModelSeed is the parent of a model's first block.
func ModelSeed(model string) BlockHash {
	return BlockHash(xxhash.Sum64String(model))
}

// scratch is the per-call working memory of hashing, pooled so that a warm
// Hasher does not allocate.
type scratch struct {
	text   []byte
	tokens []uint32
	block  []byte // parent hash followed by one block of token ids
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxPooledScratch keeps one huge prompt from pinning its buffers forever.
const maxPooledScratch = 4 << 20

func putScratch(s *scratch) {
	if cap(s.text) > maxPooledScratch || cap(s.tokens)*4 > maxPooledScratch {
		return
	}
	scratchPool.Put(s)
}

// HashPrompt renders p with the chat template (see AppendRender), tokenizes it
// and appends the chain of hashes of its full blocks to dst. A trailing
// partial block is not hashed: engines cache full blocks only.
func (h *Hasher) HashPrompt(dst []BlockHash, p *Prompt) []BlockHash {
	s := scratchPool.Get().(*scratch)
	s.text = AppendRender(s.text[:0], p)
	var text string
	if len(s.text) > 0 {
		// The tokenizer is bound not to retain text, so aliasing the pooled
		// buffer saves a copy of the whole prompt.
		text = unsafe.String(&s.text[0], len(s.text))
	}
	s.tokens = h.tokenizer().Tokenize(s.tokens[:0], text)
	dst = h.chain(dst, s, ModelSeed(p.Model), s.tokens)
	putScratch(s)
	return dst
}

// HashTokens appends the chain of hashes of the full blocks of tokens, as the
// first blocks of a model's prompt, to dst.
func (h *Hasher) HashTokens(dst []BlockHash, model string, tokens []uint32) []BlockHash {
	return h.HashTokensFrom(dst, ModelSeed(model), tokens)
}

// HashTokensFrom appends the chain of hashes of the full blocks of tokens,
// continuing the chain after parent, to dst.
func (h *Hasher) HashTokensFrom(dst []BlockHash, parent BlockHash, tokens []uint32) []BlockHash {
	s := scratchPool.Get().(*scratch)
	dst = h.chain(dst, s, parent, tokens)
	putScratch(s)
	return dst
}

// chain hashes each full block as xxhash64 of the parent hash (8 bytes, little
// endian) followed by the block's token ids (4 bytes each, little endian).
func (h *Hasher) chain(dst []BlockHash, s *scratch, parent BlockHash, tokens []uint32) []BlockHash {
	bs := h.blockSize()
	need := 8 + 4*bs
	if cap(s.block) < need {
		s.block = make([]byte, need)
	}
	buf := s.block[:need]
	for len(tokens) >= bs {
		binary.LittleEndian.PutUint64(buf, uint64(parent))
		for i, t := range tokens[:bs] {
			binary.LittleEndian.PutUint32(buf[8+4*i:], t)
		}
		parent = BlockHash(xxhash.Sum64(buf))
		dst = append(dst, parent)
		tokens = tokens[bs:]
	}
	return dst
}

// AppendRender appends the canonical text of p to dst: the chat template the
// simulator applies (accelerators/sim.RenderChat), byte for byte.
//
//	<|tools|>\n{canonical tools JSON}\n      when Tools is a non-empty array
//	<|{role}|>\n{content}\n                  per message
//	<|tool_call|>{name} {arguments}\n       per tool call of an assistant message
//	<|assistant|>\n                          the generation prompt
//
// The tools JSON is canonical: decoded with numbers kept as spelled and
// re-encoded with encoding/json, so it is compact, object keys are sorted and
// <, > and & are escaped. Tools that are absent, null, empty, not an array or
// not valid JSON render no tools section. When Messages is nil the result is
// Text alone.
func AppendRender(dst []byte, p *Prompt) []byte {
	if p.Messages == nil {
		return append(dst, p.Text...)
	}
	if canon := canonicalTools(p.Tools); canon != nil {
		dst = append(dst, "<|tools|>\n"...)
		dst = append(dst, canon...)
		dst = append(dst, '\n')
	}
	for i := range p.Messages {
		m := &p.Messages[i]
		dst = append(dst, "<|"...)
		dst = append(dst, m.Role...)
		dst = append(dst, "|>\n"...)
		dst = append(dst, m.Content...)
		dst = append(dst, '\n')
		if m.Role != "assistant" {
			continue
		}
		for _, tc := range m.ToolCalls {
			dst = append(dst, "<|tool_call|>"...)
			dst = append(dst, tc.Name...)
			dst = append(dst, ' ')
			dst = append(dst, tc.Arguments...)
			dst = append(dst, '\n')
		}
	}
	return append(dst, "<|assistant|>\n"...)
}

// toolsCache remembers canonical renderings of tools arrays. Agents send the
// same tools on every turn, and canonicalising through encoding/json allocates,
// so the cache is what keeps HashPrompt allocation-free in steady state.
var toolsCache struct {
	sync.RWMutex
	// protects the fields below
	m map[uint64]toolsEntry
}

type toolsEntry struct {
	raw       []byte
	canonical []byte
}

// maxToolsCache bounds the number of distinct tools arrays remembered; the
// cache is emptied when it fills, which only costs a re-encode.
const maxToolsCache = 256

// canonicalTools returns the canonical rendering of a tools array, or nil
// when there is nothing to render.
func canonicalTools(raw []byte) []byte {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	key := xxhash.Sum64(raw)
	toolsCache.RLock()
	e, ok := toolsCache.m[key]
	toolsCache.RUnlock()
	if ok && string(e.raw) == string(raw) {
		return e.canonical
	}

	e = toolsEntry{raw: bytes.Clone(raw), canonical: encodeTools(raw)}
	toolsCache.Lock()
	if toolsCache.m == nil || len(toolsCache.m) >= maxToolsCache {
		toolsCache.m = make(map[uint64]toolsEntry, maxToolsCache)
	}
	toolsCache.m[key] = e
	toolsCache.Unlock()
	return e.canonical
}

func encodeTools(raw []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	if arr, ok := v.([]any); !ok || len(arr) == 0 {
		return nil
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return out
}

// Interface guards.
var _ Tokenizer = ApproxTokenizer{}
