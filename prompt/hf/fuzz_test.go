package hf

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/turnpike-gateway/turnpike/prompt"
)

func fuzzSeeds(f *testing.F) {
	for _, s := range []string{"", "hello world", "  x\n\n\ty", "<|im_start|>user\nhi<|im_end|>", "e\u0301\u0301", "<|im_end|>\u0338", "don't 'LL", "１２３ ٣", "👩\u200d💻", "\xff\xfe", strings.Repeat("ab", 80)} {
		f.Add(s, uint8(len(s)/2))
	}
}

// nfcSegments is what decoding the ids of s gives back: added tokens as
// written and the text between them in NFC.
func nfcSegments(tok *Tokenizer, s string) string {
	var b strings.Builder
	for len(s) > 0 {
		i, n, _ := tok.added.find(s)
		if i < 0 {
			b.WriteString(norm.NFC.String(s))
			break
		}
		b.WriteString(norm.NFC.String(s[:i]))
		b.WriteString(s[i : i+n])
		s = s[i+n:]
	}
	return b.String()
}

// FuzzEncode checks that Encode never panics, that Count agrees with it,
// that decoding gives back the NFC text, that both merge loops agree on
// every word, and that a prompt encoded incrementally from any cut gets
// the ids of encoding it whole.
func FuzzEncode(f *testing.F) {
	fuzzSeeds(f)
	tok := qwen(f).Tokenizer
	f.Fuzz(func(t *testing.T, s string, cut uint8) {
		ids := tok.Encode(nil, s)
		if n := tok.Count(s); n != len(ids) {
			t.Fatalf("Count = %d, len(Encode) = %d", n, len(ids))
		}
		if !utf8.ValidString(s) {
			return
		}
		if got, want := tok.Decode(ids), nfcSegments(tok, s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
		var sc scratch
		ns := norm.NFC.String(s)
		for i := 0; i < len(ns); {
			j := tok.split.next(ns, i)
			word := ns[i:j]
			if len(word) > 1 {
				if a, b := tok.encodeWord(nil, word, &sc), tok.encodeLong(nil, word, &sc); !slices.Equal(a, b) {
					t.Fatalf("word %q: scan merges %v, heap merges %v", word, a, b)
				}
			}
			i = j
		}
		k := int(cut) % (len(s) + 1)
		inc := NewIncremental(tok, 1<<20)
		inc.Encode(nil, "k", s[:k])
		if got := inc.Encode(nil, "k", s); !slices.Equal(got, ids) {
			t.Fatalf("incremental from %d differs at %d", k, firstDiff(got, ids))
		}
	})
}

// FuzzParseConfig checks that any tokenizer_config.json is refused with
// an error or gives a template that renders or fails without panicking.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"chat_template": "{{ messages[0].content }}"}`,
		`{"chat_template": [{"name": "default", "template": "{% for m in messages %}{{ m.role }}{% endfor %}"}]}`,
		`{"chat_template": "{{ tools | tojson(indent=2) }}", "bos_token": {"content": "<s>"}}`,
		`{"chat_template": "{{ raise_exception('x') }}"}`, `{"chat_template": 3}`, `[`,
	} {
		f.Add([]byte(s))
	}
	msgs := []prompt.Message{{Role: "user", Content: "hi"}, {Role: "assistant", ToolCalls: []prompt.ToolCall{{Name: "f", Arguments: `{"a": [1, 2.5, "x"]}`}}}}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil || c.ChatTemplate == "" {
			return
		}
		tpl, err := NewTemplate(c)
		if err != nil {
			return
		}
		_, _ = tpl.Render(msgs, []byte(`[{"type": "function", "function": {"name": "f"}}]`), true)
	})
}

// FuzzRenderArguments checks that tool call arguments and tools of any
// shape render or fail without panicking, and that valid JSON objects
// reach the template's output with their keys in order.
func FuzzRenderArguments(f *testing.F) {
	for _, s := range []string{`{}`, `{"b": 1, "a": [true, null, 1e400]}`, `"str"`, `{"x": {"y": -0.0}}`, `[1,2]`, `{`, ``} {
		f.Add(s)
	}
	tpl := qwen(f).Template
	f.Fuzz(func(t *testing.T, args string) {
		msgs := []prompt.Message{{Role: "user", Content: "q"}, {Role: "assistant", ToolCalls: []prompt.ToolCall{{Name: "f", Arguments: args}}}}
		_, _ = tpl.Render(msgs, []byte(args), true)
	})
}
