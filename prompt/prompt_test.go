package prompt

import (
	"bytes"
	"encoding/binary"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
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
				want = append(want, approxRule(g))
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

// approxRule is Approx's id of a group as its documentation spells it,
// in big numbers: the bytes little-endian, a short group's length above
// them, times 2^64/φ modulo 2^64, the top 17 bits.
func approxRule(g string) uint32 {
	v := new(big.Int)
	for i := len(g) - 1; i >= 0; i-- {
		v.Lsh(v, 8).Or(v, big.NewInt(int64(g[i])))
	}
	if len(g) < 4 {
		v.Or(v, new(big.Int).Lsh(big.NewInt(int64(len(g))), 32))
	}
	phi, _ := new(big.Int).SetString("9E3779B97F4A7C15", 16)
	v.Mul(v, phi).Mod(v, new(big.Int).Lsh(big.NewInt(1), 64)).Rsh(v, 64-17)
	return uint32(v.Uint64())
}

// TestApproxIDSpread: ids of random groups of four bytes fill the
// vocabulary evenly (no id gets more than twice its share over many
// draws), and a short group never takes the id of itself padded with
// zero bytes.
func TestApproxIDSpread(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const draws = 64 * ApproxVocabSize
	counts := make([]int32, ApproxVocabSize)
	var b [4]byte
	for range draws {
		binary.LittleEndian.PutUint32(b[:], rng.Uint32())
		id := ApproxID(string(b[:]))
		if id >= ApproxVocabSize {
			t.Fatalf("ApproxID(%x) = %d, past the vocabulary", b, id)
		}
		counts[id]++
	}
	if lo, hi := slices.Min(counts), slices.Max(counts); lo < 64/2 || hi > 64*2 {
		t.Errorf("ids drawn %d to %d times each, want about 64", lo, hi)
	}
	for _, g := range []string{"a", "ab", "abc", "\x00", "\x00\x00\x00"} {
		padded := (g + "\x00\x00\x00")[:4]
		if ApproxID(g) == ApproxID(padded) {
			t.Errorf("%q and %q have one id", g, padded)
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
			want = append(want, approxRule(s[:min(4, len(s))]))
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
