package sim

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Tokenizer constants. They are part of the rule in Tokenize's comment and
// must not change: the gateway predicts cache hits with the same rule.
const (
	// TokenBytes is how many bytes of UTF-8 text make one token.
	TokenBytes = 4
	// VocabSize bounds token ids: every id is below it.
	VocabSize = 1 << 17
)

// Tokenize is the simulator's tokenizer. The rule, which other packages
// replicate and must keep in step with:
//
//   - the text is taken as its UTF-8 bytes, cut into consecutive runs of
//     TokenBytes (4) bytes from the start; the last run may be shorter.
//     Runs do not respect character boundaries;
//   - each run is one token: its bytes as a little-endian number, for a
//     run shorter than TokenBytes its length in bits 32 and up, times
//     0x9E3779B97F4A7C15 (2^64/φ) modulo 2^64, of which the top 17 bits
//     are the id (below VocabSize, 2^17).
//
// So the token count is ceil(len(text)/4), and the rule is prefix-stable:
// if a is a prefix of b, every token of a is the same token of b except
// possibly a's last one, when len(a) is not a multiple of 4.
func Tokenize(text string) []uint32 {
	return AppendTokens(make([]uint32, 0, CountTokens(text)), text)
}

// AppendTokens appends the tokens of text (see Tokenize) to dst.
func AppendTokens(dst []uint32, text string) []uint32 {
	for i := 0; i < len(text); i += TokenBytes {
		run := text[i:min(i+TokenBytes, len(text))]
		var v uint64
		for j := range len(run) {
			v |= uint64(run[j]) << (8 * j)
		}
		if len(run) < TokenBytes {
			v |= uint64(len(run)) << 32
		}
		dst = append(dst, uint32((v*0x9E3779B97F4A7C15)>>(64-17)))
	}
	return dst
}

// CountTokens is len(Tokenize(text)) without building the slice.
func CountTokens(text string) int {
	return (len(text) + TokenBytes - 1) / TokenBytes
}

// BlockHash is the prefix-cache hash of one full KV block: xxhash64 over
// parent (8 bytes little-endian; 0 for a sequence's first block) followed
// by each token id of the block (4 bytes little-endian each). Chaining the
// parent makes a block's hash name its whole prefix. The simulator keys its
// cache by it and publishes it in KV events.
func BlockHash(parent uint64, tokens []uint32) uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [64]byte
	binary.LittleEndian.PutUint64(buf[:8], parent)
	n := 8
	for _, t := range tokens {
		if n+4 > len(buf) {
			d.Write(buf[:n])
			n = 0
		}
		binary.LittleEndian.PutUint32(buf[n:], t)
		n += 4
	}
	d.Write(buf[:n])
	return d.Sum64()
}

// ChatTokenizer is a model's own chat template and tokenizer, for an
// engine that tokenizes as the real one would (Config.Tokenizer): its
// prompts, KV blocks, block hashes and KV events then carry the model's
// token ids. The generated text is still cut into TokenBytes runs, one a
// sampled token, so output lengths keep the documented rule.
// Implementations must be safe for concurrent use.
type ChatTokenizer interface {
	// RenderChat is the prompt text of messages and tools (the request's
	// raw tools array, or nil), ending in the generation prompt when
	// addGenerationPrompt is set; an error when the template refuses.
	RenderChat(messages []ChatMessage, tools json.RawMessage, addGenerationPrompt bool) (string, error)
	// Encode appends the token ids of text to dst.
	Encode(dst []uint32, text string) []uint32
}

// Chat template markers.
const (
	toolsMarker    = "<|tools|>\n"
	toolCallMarker = "<|tool_call|>"
	assistantTurn  = "<|assistant|>\n"
)

// RenderChat is the simulator's chat template: the prompt text a chat
// request is tokenized as. The rule, which other packages replicate:
//
//  1. If tools is a non-empty JSON array: "<|tools|>\n", then the array
//     re-marshalled canonically, then "\n". Canonical means decoded into
//     Go's any with json.Decoder.UseNumber (numbers keep their spelling)
//     and written back with encoding/json's Marshal: compact, object keys
//     sorted, and <, > and & escaped as \u003c, \u003e and \u0026.
//  2. For each message in order: "<|" + role + "|>\n" + content + "\n".
//     content is the string, or the concatenated "text" fields of its
//     content parts, or empty when null. A "tool" message is rendered the
//     same way with role "tool".
//  3. After an assistant message's content line, each of its tool calls
//     adds "<|tool_call|>" + function name + " " + arguments + "\n", the
//     arguments string as sent.
//  4. Finally "<|assistant|>\n", the generation prompt.
//
// Because generation starts right after the final marker, a follow-up turn
// that carries the assistant's answer renders the previous prompt plus the
// answer as its own prefix, and so hits the cache the first turn filled.
func RenderChat(messages []ChatMessage, tools json.RawMessage) string {
	var b strings.Builder
	if canon := canonicalTools(tools); canon != nil {
		b.WriteString(toolsMarker)
		b.Write(canon)
		b.WriteByte('\n')
	}
	for i := range messages {
		m := &messages[i]
		b.WriteString("<|")
		b.WriteString(m.Role)
		b.WriteString("|>\n")
		b.WriteString(m.Content.Text())
		b.WriteByte('\n')
		if m.Role == "assistant" {
			for _, tc := range m.ToolCalls {
				b.WriteString(toolCallMarker)
				b.WriteString(tc.Function.Name)
				b.WriteByte(' ')
				b.WriteString(tc.Function.Arguments)
				b.WriteByte('\n')
			}
		}
	}
	b.WriteString(assistantTurn)
	return b.String()
}

// canonicalTools returns the canonical form of a tools array, or nil when
// there are no tools (absent, null, empty or not an array).
func canonicalTools(tools json.RawMessage) []byte {
	if len(bytes.TrimSpace(tools)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(tools))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return nil
	}
	out, err := json.Marshal(arr)
	if err != nil {
		return nil
	}
	return out
}
