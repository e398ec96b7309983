package prompt

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestApprox(t *testing.T) {
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
			got := Approx{}.Encode(nil, tc.text)
			if !slices.Equal(got, want) {
				t.Fatalf("Tokenize(%q) = %v, want %v", tc.text, got, want)
			}
		})
	}
}

// TestApproxTokens: the estimate counts the tokens Approx makes.
func TestApproxTokens(t *testing.T) {
	for _, text := range []string{"", "a", "abcd", "abcde", "héllo", strings.Repeat("x", 1001)} {
		if got, want := ApproxTokens(len(text)), len(Approx{}.Encode(nil, text)); got != want {
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

	t.Run("from any offset", func(t *testing.T) {
		checkRenderFrom(t, p, want)
	})
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

// TestApproxEncodeLengths: the four-at-a-time loop cuts every length as
// the rule does, one group of four bytes at a time.
func TestApproxEncodeLengths(t *testing.T) {
	text := strings.Repeat("héllo wörld, ", 8)
	for n := 0; n <= len(text); n++ {
		var want []uint32
		for s := text[:n]; len(s) > 0; s = s[min(4, len(s)):] {
			want = append(want, uint32(xxhash.Sum64String(s[:min(4, len(s))])%ApproxVocabSize))
		}
		if got := (Approx{}).Encode([]uint32{7}, text[:n]); !slices.Equal(got[1:], want) || got[0] != 7 {
			t.Fatalf("Encode of %d bytes differs from the rule", n)
		}
	}
}

// checkRenderFrom holds AppendRenderEndsFrom, at every offset of the
// rendering full of p and past it, to the part of full past the offset,
// appended to what dst had, with the whole rendering's message ends;
// and so when it is told the ends of any number of p's first messages.
func checkRenderFrom(t *testing.T, p *Prompt, full string) {
	t.Helper()
	_, wantEnds := AppendRenderEnds([]byte("xy"), p, nil)
	_, known := AppendRenderEnds(nil, p, nil)
	for skip := 0; skip <= len(full)+2; skip++ {
		for k := 0; k <= len(known); k++ {
			got, ends := AppendRenderEndsFrom([]byte("xy"), p, nil, skip, known[:k])
			if want := "xy" + full[min(skip, len(full)):]; string(got) != want {
				t.Fatalf("skip %d, %d ends known: got %q, want %q", skip, k, got, want)
			}
			if !slices.Equal(ends, wantEnds) {
				t.Fatalf("skip %d, %d ends known: ends %v, want %v", skip, k, ends, wantEnds)
			}
		}
	}
}

// FuzzAppendRenderFrom: for any chat body and offset, the rendering past
// the offset is the whole rendering's tail; its length, and so the
// approximate count, is known without rendering.
func FuzzAppendRenderFrom(f *testing.F) {
	f.Add([]byte(`{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"function":{"name":"ls","arguments":"{}"}}]}]}`), 7)
	f.Add(agentBody(4<<10), 1000)
	f.Fuzz(func(t *testing.T, body []byte, skip int) {
		req, err := ParseChat(body)
		if err != nil {
			return
		}
		full, known := AppendRenderEnds(nil, &req.Prompt, nil)
		if n := RenderedLen(&req.Prompt); n != len(full) {
			t.Fatalf("RenderedLen %d, rendering of %d bytes", n, len(full))
		}
		if n, want := Count(nil, &req.Prompt), (Approx{}).Count(string(full)); n != want {
			t.Fatalf("Count %d without rendering, %d of the rendering", n, want)
		}
		skip = max(skip, 0) % (len(full) + 3)
		for _, k := range []int{0, len(known) / 2, len(known)} {
			got, ends := AppendRenderEndsFrom(nil, &req.Prompt, nil, skip, known[:k])
			if !bytes.Equal(got, full[min(skip, len(full)):]) {
				t.Fatalf("skip %d, %d ends known: got %q, want %q", skip, k, got, full[min(skip, len(full)):])
			}
			if !slices.Equal(ends, known) {
				t.Fatalf("skip %d, %d ends known: ends %v, want %v", skip, k, ends, known)
			}
		}
	})
}

// BenchmarkApproxEncode encodes a cold prompt of 168 KiB (about 43k
// tokens), as every first turn of an agent's session is.
func BenchmarkApproxEncode(b *testing.B) {
	text := strings.Repeat("func main() { fmt.Println(\"héllo, wörld\") }\n", 168<<10/47)
	dst := make([]uint32, 0, ApproxTokens(len(text)))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		dst = Approx{}.Encode(dst[:0], text)
	}
}
