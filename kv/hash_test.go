package kv

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// conversation returns a chat of n user turns with long enough messages to
// fill several blocks each.
func conversation(n int) []prompt.Message {
	msgs := []prompt.Message{{Role: "system", Content: strings.Repeat("You are a careful coding agent. ", 20)}}
	for i := range n {
		msgs = append(msgs, prompt.Message{Role: "user", Content: strings.Repeat("please fix test number "+string(rune('a'+i))+". ", 10)})
		if i < n-1 {
			msgs = append(msgs, prompt.Message{Role: "assistant", Content: "running the tests", ToolCalls: []prompt.ToolCall{{Name: "bash", Arguments: `{"cmd":"go test ./..."}`}}})
			msgs = append(msgs, prompt.Message{Role: "tool", Content: strings.Repeat("ok  \tpkg\t0.01s\n", 8)})
		}
	}
	return msgs
}

// wordTokenizer stands in for an engine's exact tokenizer.
type wordTokenizer struct{}

func (wordTokenizer) Encode(dst []uint32, text string) []uint32 {
	for _, w := range strings.Fields(text) {
		dst = append(dst, uint32(xxhash.Sum64String(w)))
	}
	return dst
}

func TestHashPrompt(t *testing.T) {
	tools := []byte(`[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}]`)
	var h Hasher

	t.Run("same prompt same chain", func(t *testing.T) {
		p := &prompt.Prompt{Model: "llama", Tools: tools, Messages: conversation(3)}
		a, b := hashPrompt(&h, nil, p), hashPrompt(&h, nil, p)
		if len(a) < 10 || !slices.Equal(a, b) {
			t.Fatalf("chains differ or too short: %d vs %d blocks", len(a), len(b))
		}
	})

	t.Run("other model other chain", func(t *testing.T) {
		a := hashPrompt(&h, nil, &prompt.Prompt{Model: "llama", Messages: conversation(2)})
		b := hashPrompt(&h, nil, &prompt.Prompt{Model: "qwen", Messages: conversation(2)})
		for i := range a {
			if slices.Contains(b, a[i]) {
				t.Fatalf("block %d of one model's chain is in the other's", i)
			}
		}
	})

	t.Run("grown conversation shares earlier blocks", func(t *testing.T) {
		turn1 := &prompt.Prompt{Model: "llama", Tools: tools, Messages: conversation(1)}
		turn3 := &prompt.Prompt{Model: "llama", Tools: tools, Messages: conversation(3)}
		a, b := hashPrompt(&h, nil, turn1), hashPrompt(&h, nil, turn3)
		// Turn 1's text is a prefix of turn 3's; every block made only of its
		// whole 4-byte tokens is shared.
		text1 := prompt.AppendRender(nil, turn1)
		shared := len(text1) / prompt.ApproxBytesPerToken / DefaultBlockSize
		if shared == 0 || len(b) <= len(a) {
			t.Fatalf("degenerate fixture: %d shared of %d and %d blocks", shared, len(a), len(b))
		}
		if !slices.Equal(a[:shared], b[:shared]) {
			t.Fatalf("first %d blocks differ", shared)
		}
		if a[len(a)-1] == b[len(a)-1] && shared < len(a) {
			t.Fatalf("block after the shared text is shared")
		}
	})

	t.Run("tools canonical", func(t *testing.T) {
		spaced := []byte(`[ { "function" : {"parameters":{"type":"object"}, "name":"bash"}, "type":"function" } ]`)
		a := hashPrompt(&h, nil, &prompt.Prompt{Model: "llama", Tools: tools, Messages: conversation(1)})
		b := hashPrompt(&h, nil, &prompt.Prompt{Model: "llama", Tools: spaced, Messages: conversation(1)})
		if !slices.Equal(a, b) {
			t.Fatalf("spacing or key order changed the chain")
		}
	})

	t.Run("full blocks only", func(t *testing.T) {
		text := strings.Repeat("x", prompt.ApproxBytesPerToken*(2*DefaultBlockSize+DefaultBlockSize-1))
		if got := hashPrompt(&h, nil, &prompt.Prompt{Model: "m", Text: text}); len(got) != 2 {
			t.Fatalf("got %d blocks, want 2", len(got))
		}
		if got := hashPrompt(&Hasher{BlockSize: 4}, nil, &prompt.Prompt{Model: "m", Text: text}); len(got) != 11 {
			t.Fatalf("block size 4: got %d blocks, want 11", len(got))
		}
	})

	t.Run("completion text", func(t *testing.T) {
		text := strings.Repeat("the quick brown fox ", 40)
		got := hashPrompt(&h, nil, &prompt.Prompt{Model: "m", Text: text})
		want := h.HashTokens(nil, "m", prompt.Approx{}.Encode(nil, text))
		if len(got) == 0 || !slices.Equal(got, want) {
			t.Fatalf("HashPrompt of text differs from HashTokens of its tokens")
		}
	})

	t.Run("exact tokenizer", func(t *testing.T) {
		exact := wordTokenizer{}
		p := &prompt.Prompt{Model: "llama", Messages: conversation(3)}
		got := hashPrompt(&h, exact, p)
		want := h.HashTokens(nil, "llama", wordTokenizer{}.Encode(nil, string(prompt.AppendRender(nil, p))))
		if len(got) == 0 || !slices.Equal(got, want) {
			t.Fatalf("exact chain is not the chain of the tokenizer's ids")
		}
		approx := hashPrompt(&h, nil, p)
		if len(approx) <= len(got) || approx[0] == got[0] {
			t.Fatalf("approx (%d blocks) and exact (%d blocks) chains should differ", len(approx), len(got))
		}
	})

	t.Run("chain continues", func(t *testing.T) {
		tokens := prompt.Approx{}.Encode(nil, strings.Repeat("abcdefgh", 64))
		all := h.HashTokens(nil, "m", tokens)
		head := h.HashTokens(nil, "m", tokens[:3*DefaultBlockSize])
		tail := h.HashTokensFrom(nil, head[len(head)-1], tokens[3*DefaultBlockSize:])
		if !slices.Equal(all, append(head, tail...)) {
			t.Fatalf("HashTokensFrom does not continue the chain")
		}
	})

	t.Run("appends to dst", func(t *testing.T) {
		dst := []BlockHash{42}
		got := h.HashTokens(dst, "m", prompt.Encode(nil, nil, &prompt.Prompt{Model: "m", Messages: conversation(1)}))
		if got[0] != 42 || len(got) < 2 {
			t.Fatalf("dst not kept: %v", got[:2])
		}
	})
}

func (w wordTokenizer) Count(text string) int { return len(w.Encode(nil, text)) }

// hashPrompt is what the turn path does with a prompt: encode it with the
// tokenizer (nil: the approximate one), then chain its blocks.
func hashPrompt(h *Hasher, tok prompt.Tokenizer, p *prompt.Prompt) []BlockHash {
	return h.HashTokens(nil, p.Model, prompt.Encode(tok, nil, p))
}

// TestChainByteOrder: hashing 16-token blocks on their values gives the
// chain of their little-endian bytes, the one every block size computes.
func TestChainByteOrder(t *testing.T) {
	tokens := prompt.Approx{}.Encode(nil, strings.Repeat("abcdefghij", 300))
	var h Hasher
	var buf []byte
	want := chainCopying(nil, &buf, DefaultBlockSize, ModelSeed("m"), tokens)
	if got := h.HashTokens(nil, "m", tokens); !slices.Equal(got, want) || len(got) == 0 {
		t.Fatalf("in place %d blocks, copied %d; chains differ", len(got), len(want))
	}
}

// TestHashBlock16 holds the unrolled block hash to xxhash64 of the bytes.
func TestHashBlock16(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var b [72]byte
	tok := make([]uint32, 16)
	for range 2000 {
		parent := rng.Uint64()
		binary.LittleEndian.PutUint64(b[:], parent)
		for i := range tok {
			tok[i] = rng.Uint32()
			binary.LittleEndian.PutUint32(b[8+4*i:], tok[i])
		}
		if got, want := hashBlock16(parent, tok), xxhash.Sum64(b[:]); got != want {
			t.Fatalf("hashBlock16 = %x, want %x", got, want)
		}
	}
}
