package sim

import (
	"sync/atomic"
	"time"
)

// sequence is one request inside the engine. The handler builds it
// (prompt, planned output, final token ids), hands it to the engine loop
// with submit, and from then on reads only the atomics and, once done is
// set, the results. The engine loop owns every other field.
type sequence struct {
	// Set by the handler before submit, read-only after.
	id           uint64
	promptBytes  int
	promptTokens int
	out          output
	// tokens is Tokenize(prompt + out.text): the ids of every token that
	// will ever be complete. Token i is final once 4(i+1) bytes exist.
	// With a ChatTokenizer, it is the prompt's ids, then out.text's
	// (AppendTokens), each output token final once its 4 bytes exist.
	tokens []uint32
	// exact: the prompt's ids came from a ChatTokenizer.
	exact bool
	// leaseID, when set, holds the blocks for a remote decoder when the
	// sequence finishes (do_remote_decode); promptHash names the prompt
	// to the decoder. remote is the prompt tokens pulled from a prefill
	// engine instead of computed (do_remote_prefill).
	leaseID    string
	promptHash uint64
	remote     int
	// priority orders it under the priority scheduling policy (lower
	// first).
	priority int
	// adapter is the LoRA adapter it runs with, "" for the base model;
	// loraID is its lora_int_id. Its KV blocks chain from the adapter's
	// seed (loraSeed), apart from the base model's and other adapters'.
	adapter string
	loraID  int64

	// Owned by the engine loop.
	computed     int      // tokens whose KV is computed
	generated    int      // completion tokens sampled
	blocks       []int32  // KV blocks held, in order
	hashes       []uint64 // BlockHash of full blocks, computed lazily
	stored       int      // leading blocks stored in (or found in) the cache
	admitted     bool     // counted in the prefix-cache metrics
	cachedTokens int      // prefix-cache hit at first admission
	arrival      time.Duration
	firstToken   time.Duration
	lastToken    time.Duration
	loading      bool          // pulling remote KV until loadUntil
	loadUntil    time.Duration // simulated time the pull ends
	// leaseBlocks are the block ids held under leaseID; set before
	// finish, read by the handler after done.
	leaseBlocks []int32

	// Shared with the handler.
	produced  atomic.Int32  // completion tokens the client may send
	done      atomic.Bool   // set last, after err and the timings
	cancelled atomic.Bool   // the client went away
	notify    chan struct{} // capacity 1: "look again"
	err       error         // why the engine gave up; read after done
}

// newExactSequence is newSequence for a prompt whose ids a
// ChatTokenizer made; it takes ids.
func newExactSequence(id uint64, prompt string, ids []uint32, out output) *sequence {
	return &sequence{
		id:           id,
		promptBytes:  len(prompt),
		promptTokens: len(ids),
		out:          out,
		tokens:       AppendTokens(ids, out.text),
		exact:        true,
		notify:       make(chan struct{}, 1),
	}
}

func newSequence(id uint64, prompt string, out output) *sequence {
	full := make([]uint32, 0, CountTokens(prompt)+out.tokens+1)
	full = AppendTokens(full, prompt+out.text)
	return &sequence{
		id:           id,
		promptBytes:  len(prompt),
		promptTokens: CountTokens(prompt),
		out:          out,
		tokens:       full,
		notify:       make(chan struct{}, 1),
	}
}

// numTokens is the sequence's length: prompt plus sampled tokens.
func (q *sequence) numTokens() int { return q.promptTokens + q.generated }

// completeTokens is how many leading tokens can no longer change: those
// whose 4 bytes all exist. Only they may enter a cached block, because a
// partial last token changes when the next piece of text is appended.
func (q *sequence) completeTokens() int {
	if q.exact {
		return q.promptTokens + min(q.generated*TokenBytes, len(q.out.text))/TokenBytes
	}
	return (q.promptBytes + min(q.generated*TokenBytes, len(q.out.text))) / TokenBytes
}

// hashAt is the BlockHash of full block i, which must be complete.
func (q *sequence) hashAt(i, blockSize int) uint64 {
	for len(q.hashes) <= i {
		j := len(q.hashes)
		parent := loraSeed(q.adapter)
		if j > 0 {
			parent = q.hashes[j-1]
		}
		q.hashes = append(q.hashes, BlockHash(parent, q.tokens[j*blockSize:(j+1)*blockSize]))
	}
	return q.hashes[i]
}

// signal wakes the handler without ever blocking the engine.
func (q *sequence) signal() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// finish ends the sequence for the handler, with err nil on success.
func (q *sequence) finish(err error) {
	q.err = err
	q.done.Store(true)
	q.signal()
}
