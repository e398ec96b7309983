// Package prompt is the chat message model the gateway routes by: a
// request's messages and tools as the engine's chat template reads them,
// their canonical rendering, and the tokenizers that count and encode it.
//
// # Overview
//
// A Prompt is what an engine will see before tokenization: the model, the
// tools array and the messages (or, for /v1/completions, the text). The
// gateway builds one per turn, once: the chat relay from the client's body
// (ParseChat), the Responses layer from the conversation it rebuilt.
// AppendRender writes the canonical text of a Prompt, the chat template of
// the embedded simulator byte for byte; a Tokenizer turns text into token
// ids. Encode and Count do both for a whole Prompt. Routing hashes the ids
// into KV-cache blocks (package kv); admission, quotas and context fitting
// use the count. Approx is the default tokenizer: exact against the
// simulator, an estimate against real engines.
//
// ParseChat and ParseCompletion read a client's body in one pass, walking
// it with the JSON scanner of internal/jsonscan, and accept, refuse and
// decode what encoding/json would, with the same Param and Code, except
// that keys match exactly; a reference parser built on encoding/json lives in the
// tests, and the fuzz targets hold the two to each other.
//
// TextBound reads a chat, completion or Responses body without decoding
// it, allocating nothing, for its model and a lower bound on the bytes of
// text its prompt holds: what the gateway needs to refuse a body too long
// for its model's context before it pays for decoding it.
//
// A Memo remembers recent chat bodies: an agent resends its whole history
// each turn, so Memo.ParseChat matches a body to its conversation's last
// turn (by the opening of the messages array, then a running hash message
// by message) and decodes only the messages past those they share. The
// Request's Prior carries the earlier turn's Chain (render offsets and
// block hashes), which the dispatcher uses to encode and hash only what is
// new, and where it leaves this turn's chain for the next.
//
// # Request lifecycle and ownership
//
// A Request aliases the body it was parsed from: strings that needed no
// decoding point into it, the rest into a few buffers of its own. The
// caller keeps the body alive and unmodified while the Request and its
// Prompt are in use; the gateway reads the body once, parses it and
// forwards the same bytes, or a copy with stream_options spliced in.
//
// # Concurrency model
//
// Prompts are values owned by the turn that built them and are not
// modified once handed to dispatch. Tokenizers must be safe for concurrent
// use. Encode and Count use pooled scratch buffers and, warm, allocate
// nothing beyond the caller's destination slice.
package prompt
