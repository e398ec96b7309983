package dispatch

import (
	"unsafe"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// resumePrompt encodes and hashes a prompt that continues an earlier turn
// of its conversation (spec.Prior, from prompt.Memo) only past what the
// two share: the blocks of the earlier turn's render that lie wholly
// within the messages both have are its hashes again. It needs a
// tokenizer whose tokens do not depend on the text after them, block by
// block: prompt.Approx, whose every token is ApproxBytesPerToken bytes of
// the render. It reports false, having done nothing, when the turn cannot
// be resumed so.
func (t *Turn) resumePrompt(tok prompt.Tokenizer) bool {
	spec, d := t.spec, t.d
	pr := spec.Prior
	if _, approx := tok.(prompt.Approx); pr == nil || !approx {
		return false
	}
	p := spec.Prompt
	blockTokens := d.hasher.BlockTokens()
	blockBytes := blockTokens * prompt.ApproxBytesPerToken

	t.bufs = bufferPool.Get().(*buffers)
	t.bufs.takeTokens()
	// The blocks of the earlier chain that lie wholly within the messages
	// both turns have are this prompt's too; only the rendering past them
	// is made, encoded and hashed.
	reuse := 0
	tools := prompt.ToolsKey(p.Tools)
	c := pr.Chain()
	k := pr.Messages
	if c != nil && c.Model == spec.Model && c.Tools == tools && c.BlockBytes == blockBytes && k > 0 && k <= len(c.Ends) && k <= len(p.Messages) {
		reuse = min(len(c.Blocks), c.Ends[k-1]/blockBytes)
	}
	// The shared messages render as the earlier turn's did (the memo
	// matched their bytes, and the tools are the same), so the walk
	// starts at the message the reused blocks end in.
	var known []int
	var shared []uint64
	if reuse > 0 {
		known, shared = c.Ends[:k], c.Blocks[:reuse]
	}
	render, ends := prompt.AppendRenderEndsFrom(t.bufs.render[:0], p, make([]int, 0, len(p.Messages)), reuse*blockBytes, known)
	t.bufs.render = render
	t.bufs.tokens = tok.Encode(t.bufs.tokens[:0], bytesString(render))
	t.tokens = t.bufs.tokens
	t.route.PromptTokens = reuse*blockTokens + len(t.tokens)

	// The hashes outlive the turn, in the memo, so they are not pooled.
	hashes := make([]kv.BlockHash, reuse, reuse+len(t.tokens)/blockTokens+1)
	parent := kv.ModelSeed(spec.Model)
	if reuse > 0 {
		copy(hashes, asBlockHashes(shared))
		d.resumedTokens.Add(float64(reuse * blockTokens))
		parent = hashes[reuse-1]
	}
	hashes = d.hasher.HashTokensFrom(hashes, parent, t.tokens)
	t.route.Hashes = hashes
	pr.Remember(&prompt.Chain{Model: spec.Model, Tools: tools, Ends: ends, Blocks: asUint64s(hashes), BlockBytes: blockBytes})
	return true
}

// asBlockHashes and asUint64s view block hashes as the memo keeps them:
// kv.BlockHash is a uint64.
func asBlockHashes(h []uint64) []kv.BlockHash {
	return unsafe.Slice((*kv.BlockHash)(unsafe.SliceData(h)), len(h))
}

func asUint64s(h []kv.BlockHash) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.SliceData(h)), len(h))
}

func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
