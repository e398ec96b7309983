// Package hf tokenizes and renders prompts exactly as a model's own
// Hugging Face files do, in process: tokenizer.json (byte-level BPE, as
// Qwen2/Qwen3 and Llama 3 use) and the Jinja chat_template of
// tokenizer_config.json.
//
// # Overview
//
// Load reads a model directory (tokenizer.json or tokenizer.json.gz, and
// tokenizer_config.json) into a Model: a Tokenizer, which implements
// prompt.Tokenizer, and a Template. Encoding follows the Hugging Face
// tokenizers library step by step: added tokens (special or not) are split
// out of the raw text first, leftmost and longest; the text between them
// is normalized to NFC; the Split pre-tokenizer cuts it into pieces (its
// pattern needs lookahead, which Go's regexp lacks, so it is a scanner in
// pretok.go that takes the alternatives in order, as the library's
// backtracking engine does); each piece's bytes are merged by BPE rank,
// the leftmost first among equal ranks. A word cache, two-way set
// associative and lock-free, skips the merges of words seen before.
// Anything in tokenizer.json that would change the ids and is not
// implemented (another model, normalizer or pattern, byte fallback, added
// tokens that strip) is refused with ErrUnsupported rather than
// approximated; such a model needs the engine's tokenizer.
//
// Template renders messages and tools as transformers' apply_chat_template
// does: jinja2 with trim_blocks and lstrip_blocks, run by gonja, with
// tojson in Python's json.dumps format and key order, raise_exception and
// Python's negative indexing supplied. Qwen3's template, recognised by its
// hash, is also written in Go (qwen3.go), which gives the same bytes in a
// fraction of the time; tests and a fuzz target hold the two together.
// Tool call arguments reach templates decoded, as OpenAI-compatible
// engines hand them over. Messages must be valid UTF-8, as JSON gives.
//
// Incremental wraps a Tokenizer for agents' prompts, which grow by a
// suffix each turn: it keeps each session's ids, bounded in bytes, and
// encodes only from a seam near the old end whose safety incremental.go
// argues and its tests attack.
//
// The fixtures in testdata (corpus.jsonl.gz, chats.jsonl.gz) are written
// by scripts/tokref from the JavaScript ports of the Hugging Face
// tokenizers and Jinja; the tests require every id and rendered byte to
// match.
//
// # Concurrency model
//
// Tokenizer, Template and Incremental are safe for concurrent use. A
// Tokenizer is immutable after loading except for its word cache, whose
// entries are immutable and swapped in atomically. Encode keeps scratch
// memory in a pool and, warm, allocates nothing beyond the caller's
// destination slice. No call retains the text it is given.
package hf
