package kv

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestApproxTokenizer(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		want []string // the byte groups, one per token
	}{
		{"empty", "", nil},
		{"short", "ab", []string{"ab"}},
		{"exact", "abcdefgh", []string{"abcd", "efgh"}},
		{"tail", "abcdefghi", []string{"abcd", "efgh", "i"}},
		// Groups are bytes, not runes: "é" is two bytes.
		{"utf8", "héllo", []string{"h\xc3\xa9l", "lo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []uint32
			for _, g := range tc.want {
				want = append(want, uint32(xxhash.Sum64String(g)%ApproxVocabSize))
			}
			got := ApproxTokenizer{}.Tokenize(nil, tc.text)
			if !slices.Equal(got, want) {
				t.Fatalf("Tokenize(%q) = %v, want %v", tc.text, got, want)
			}
		})
	}
}

// TestApproxTokens: the estimate counts the tokens ApproxTokenizer makes.
func TestApproxTokens(t *testing.T) {
	for _, text := range []string{"", "a", "abcd", "abcde", "héllo", strings.Repeat("x", 1001)} {
		if got, want := ApproxTokens(len(text)), len(ApproxTokenizer{}.Tokenize(nil, text)); got != want {
			t.Errorf("ApproxTokens(%d) = %d, want %d", len(text), got, want)
		}
	}
}

func TestAppendRender(t *testing.T) {
	p := &Prompt{
		Model: "m",
		// Unsorted keys and spacing: the rendering is canonical.
		Tools: []byte(`[ {"type": "function", "function": {"name": "ls", "description": "a<b"}} ]`),
		Messages: []Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Content: "list /tmp"},
			{Role: "assistant", Content: "", ToolCalls: []ToolCall{{Name: "ls", Arguments: `{"path":"/tmp"}`}}},
			{Role: "tool", Content: "a b c"},
			// Tool calls render for assistant messages only.
			{Role: "user", Content: "thanks", ToolCalls: []ToolCall{{Name: "ignored", Arguments: "{}"}}},
		},
	}
	want := "<|tools|>\n" +
		`[{"function":{"description":"a\u003cb","name":"ls"},"type":"function"}]` + "\n" +
		"<|system|>\nbe brief\n" +
		"<|user|>\nlist /tmp\n" +
		"<|assistant|>\n\n" +
		`<|tool_call|>ls {"path":"/tmp"}` + "\n" +
		"<|tool|>\na b c\n" +
		"<|user|>\nthanks\n" +
		"<|assistant|>\n"
	if got := string(AppendRender(nil, p)); got != want {
		t.Fatalf("AppendRender:\n got %q\nwant %q", got, want)
	}

	t.Run("no tools", func(t *testing.T) {
		p := &Prompt{Messages: []Message{{Role: "user", Content: "hi"}}}
		if got, want := string(AppendRender(nil, p)), "<|user|>\nhi\n<|assistant|>\n"; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
	t.Run("no tools section", func(t *testing.T) {
		for _, tools := range []string{"", "  ", "null", "[]", " [ ] ", "{}", `"x"`, "[{", "not json"} {
			p := &Prompt{Tools: []byte(tools), Messages: []Message{}}
			if got, want := string(AppendRender(nil, p)), "<|assistant|>\n"; got != want {
				t.Errorf("tools %q: got %q, want %q", tools, got, want)
			}
		}
	})
	t.Run("numbers keep their spelling", func(t *testing.T) {
		p := &Prompt{Tools: []byte(`[{"max": 1e3, "min": 1.50, "n": 12345678901234567890}]`), Messages: []Message{}}
		want := "<|tools|>\n" + `[{"max":1e3,"min":1.50,"n":12345678901234567890}]` + "\n<|assistant|>\n"
		if got := string(AppendRender(nil, p)); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
	t.Run("completion text as is", func(t *testing.T) {
		p := &Prompt{Tools: []byte(`[]`), Text: "once upon"}
		if got := string(AppendRender(nil, p)); got != "once upon" {
			t.Fatalf("got %q", got)
		}
	})
}

// conversation returns a chat of n user turns with long enough messages to
// fill several blocks each.
func conversation(n int) []Message {
	msgs := []Message{{Role: "system", Content: strings.Repeat("You are a careful coding agent. ", 20)}}
	for i := range n {
		msgs = append(msgs, Message{Role: "user", Content: strings.Repeat("please fix test number "+string(rune('a'+i))+". ", 10)})
		if i < n-1 {
			msgs = append(msgs, Message{Role: "assistant", Content: "running the tests", ToolCalls: []ToolCall{{Name: "bash", Arguments: `{"cmd":"go test ./..."}`}}})
			msgs = append(msgs, Message{Role: "tool", Content: strings.Repeat("ok  \tpkg\t0.01s\n", 8)})
		}
	}
	return msgs
}

// wordTokenizer stands in for an engine's exact tokenizer.
type wordTokenizer struct{}

func (wordTokenizer) Tokenize(dst []uint32, text string) []uint32 {
	for _, w := range strings.Fields(text) {
		dst = append(dst, uint32(xxhash.Sum64String(w)))
	}
	return dst
}

func TestHashPrompt(t *testing.T) {
	tools := []byte(`[{"type":"function","function":{"name":"bash","parameters":{"type":"object"}}}]`)
	var h Hasher

	t.Run("same prompt same chain", func(t *testing.T) {
		p := &Prompt{Model: "llama", Tools: tools, Messages: conversation(3)}
		a, b := h.HashPrompt(nil, p), h.HashPrompt(nil, p)
		if len(a) < 10 || !slices.Equal(a, b) {
			t.Fatalf("chains differ or too short: %d vs %d blocks", len(a), len(b))
		}
	})

	t.Run("other model other chain", func(t *testing.T) {
		a := h.HashPrompt(nil, &Prompt{Model: "llama", Messages: conversation(2)})
		b := h.HashPrompt(nil, &Prompt{Model: "qwen", Messages: conversation(2)})
		for i := range a {
			if slices.Contains(b, a[i]) {
				t.Fatalf("block %d of one model's chain is in the other's", i)
			}
		}
	})

	t.Run("grown conversation shares earlier blocks", func(t *testing.T) {
		turn1 := &Prompt{Model: "llama", Tools: tools, Messages: conversation(1)}
		turn3 := &Prompt{Model: "llama", Tools: tools, Messages: conversation(3)}
		a, b := h.HashPrompt(nil, turn1), h.HashPrompt(nil, turn3)
		// Turn 1's text is a prefix of turn 3's; every block made only of its
		// whole 4-byte tokens is shared.
		text1 := AppendRender(nil, turn1)
		shared := len(text1) / ApproxBytesPerToken / DefaultBlockSize
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
		a := h.HashPrompt(nil, &Prompt{Model: "llama", Tools: tools, Messages: conversation(1)})
		b := h.HashPrompt(nil, &Prompt{Model: "llama", Tools: spaced, Messages: conversation(1)})
		if !slices.Equal(a, b) {
			t.Fatalf("spacing or key order changed the chain")
		}
	})

	t.Run("full blocks only", func(t *testing.T) {
		text := strings.Repeat("x", ApproxBytesPerToken*(2*DefaultBlockSize+DefaultBlockSize-1))
		if got := h.HashPrompt(nil, &Prompt{Model: "m", Text: text}); len(got) != 2 {
			t.Fatalf("got %d blocks, want 2", len(got))
		}
		if got := (&Hasher{BlockSize: 4}).HashPrompt(nil, &Prompt{Model: "m", Text: text}); len(got) != 11 {
			t.Fatalf("block size 4: got %d blocks, want 11", len(got))
		}
	})

	t.Run("completion text", func(t *testing.T) {
		text := strings.Repeat("the quick brown fox ", 40)
		got := h.HashPrompt(nil, &Prompt{Model: "m", Text: text})
		want := h.HashTokens(nil, "m", ApproxTokenizer{}.Tokenize(nil, text))
		if len(got) == 0 || !slices.Equal(got, want) {
			t.Fatalf("HashPrompt of text differs from HashTokens of its tokens")
		}
	})

	t.Run("exact tokenizer", func(t *testing.T) {
		exact := Hasher{Tokenizer: wordTokenizer{}}
		p := &Prompt{Model: "llama", Messages: conversation(3)}
		got := exact.HashPrompt(nil, p)
		want := exact.HashTokens(nil, "llama", wordTokenizer{}.Tokenize(nil, string(AppendRender(nil, p))))
		if len(got) == 0 || !slices.Equal(got, want) {
			t.Fatalf("exact chain is not the chain of the tokenizer's ids")
		}
		approx := h.HashPrompt(nil, p)
		if len(approx) <= len(got) || approx[0] == got[0] {
			t.Fatalf("approx (%d blocks) and exact (%d blocks) chains should differ", len(approx), len(got))
		}
	})

	t.Run("chain continues", func(t *testing.T) {
		tokens := ApproxTokenizer{}.Tokenize(nil, strings.Repeat("abcdefgh", 64))
		all := h.HashTokens(nil, "m", tokens)
		head := h.HashTokens(nil, "m", tokens[:3*DefaultBlockSize])
		tail := h.HashTokensFrom(nil, head[len(head)-1], tokens[3*DefaultBlockSize:])
		if !slices.Equal(all, append(head, tail...)) {
			t.Fatalf("HashTokensFrom does not continue the chain")
		}
	})

	t.Run("appends to dst", func(t *testing.T) {
		dst := []BlockHash{42}
		got := h.HashPrompt(dst, &Prompt{Model: "m", Messages: conversation(1)})
		if got[0] != 42 || len(got) < 2 {
			t.Fatalf("dst not kept: %v", got[:2])
		}
	})
}

func TestXXHash4(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var b [4]byte
	for range 10000 {
		binary.LittleEndian.PutUint32(b[:], rng.Uint32())
		if got, want := xxhash4(string(b[:])), xxhash.Sum64(b[:]); got != want {
			t.Fatalf("xxhash4(%x) = %x, want %x", b, got, want)
		}
	}
}
