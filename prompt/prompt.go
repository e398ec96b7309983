package prompt

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

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
	// Model names the model; it seeds the KV-cache hash chain, so two
	// models never share blocks.
	Model string
	// Tools is the raw JSON of the request's tools array, or nil.
	Tools []byte
	// Messages is the chat. When nil, Text is the prompt instead.
	Messages []Message
	// Text is the prompt of a /v1/completions request, used as is when
	// Messages is nil.
	Text string
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
	return appendRender(dst, p, nil, 0, 0, 0)
}

// AppendRenderEnds is AppendRender that also appends to ends, for each
// message, the length of dst just past its rendering.
func AppendRenderEnds(dst []byte, p *Prompt, ends []int) ([]byte, []int) {
	dst = appendRender(dst, p, &ends, 0, 0, 0)
	return dst, ends
}

// AppendRenderEndsFrom is AppendRenderEnds that appends only the rendering
// past its first skip bytes, which it does not copy: an agent's next turn
// shares most of its rendering with the last one, whose hashes it already
// has. The ends are still offsets in the whole rendering (plus len(dst)).
//
// known, when not nil, are the message ends (offsets from the start) of
// an earlier rendering with p's tools whose first len(known) messages
// were p's: the messages that end at or before skip are not walked, their
// ends taken from known.
func AppendRenderEndsFrom(dst []byte, p *Prompt, ends []int, skip int, known []int) ([]byte, []int) {
	first, off := 0, 0
	if p.Messages != nil {
		// The first message that ends past skip starts the walk.
		first, _ = slices.BinarySearch(known, skip+1)
		first = min(first, len(p.Messages))
		base := len(dst)
		for _, e := range known[:first] {
			ends = append(ends, base+e)
		}
		if first > 0 {
			off = known[first-1]
		}
	}
	dst = appendRender(dst, p, &ends, skip, first, off)
	return dst, ends
}

// appendRender is AppendRender of the rendering past its first skip bytes,
// appending message ends to *ends unless ends is nil, from message first
// on, which starts off bytes into the rendering (the tools section is
// rendered only when first is 0).
func appendRender(dst []byte, p *Prompt, ends *[]int, skip, first, off int) []byte {
	r := renderer{dst: dst, base: len(dst), off: off, skip: skip}
	r.walk(p, ends, first)
	return r.dst
}

// RenderedLen is len(AppendRender(nil, p)), found without rendering: a
// count of approximate tokens needs no more, and rendering a large
// prompt would double what its body costs.
func RenderedLen(p *Prompt) int {
	r := renderer{skip: math.MaxInt}
	r.walk(p, nil, 0)
	return r.off
}

// walk puts p's rendering, from message first on, appending message ends
// to *ends unless ends is nil.
func (r *renderer) walk(p *Prompt, ends *[]int, first int) {
	if p.Messages == nil {
		r.put(p.Text)
		return
	}
	if first == 0 {
		if canon := canonicalTools(p.Tools); canon != nil {
			r.put("<|tools|>\n")
			r.putBytes(canon)
			r.put("\n")
		}
	}
	for i := first; i < len(p.Messages); i++ {
		m := &p.Messages[i]
		r.put("<|")
		r.put(m.Role)
		r.put("|>\n")
		r.put(m.Content)
		r.put("\n")
		if m.Role == "assistant" {
			for _, tc := range m.ToolCalls {
				r.put("<|tool_call|>")
				r.put(tc.Name)
				r.put(" ")
				r.put(tc.Arguments)
				r.put("\n")
			}
		}
		if ends != nil {
			*ends = append(*ends, r.base+r.off)
		}
	}
	r.put("<|assistant|>\n")
}

// renderer appends a rendering to dst piece by piece, leaving out its
// first skip bytes; off is the rendering's length so far.
type renderer struct {
	dst             []byte
	base, off, skip int
}

func (r *renderer) put(s string) {
	if len(s) > r.skip-r.off {
		r.dst = append(r.dst, s[max(r.skip-r.off, 0):]...)
	}
	r.off += len(s)
}

func (r *renderer) putBytes(b []byte) { r.put(unsafe.String(unsafe.SliceData(b), len(b))) }

// toolsCache remembers canonical renderings of tools arrays. Agents send the
// same tools on every turn, and canonicalising through encoding/json allocates,
// so the cache is what keeps Encode allocation-free in steady state.
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
