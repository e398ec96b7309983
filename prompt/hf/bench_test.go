package hf

import (
	"fmt"
	"strings"
	"testing"
)

// benchText is at least n tokens of the fixture corpus, strings joined
// with newlines, a mix of prose, code, JSON, multilingual text and emoji.
func benchText(tb testing.TB, n int) string {
	tb.Helper()
	tok := qwen(tb).Tokenizer
	var b strings.Builder
	cases := corpus(tb)
	for count := 0; count < n; {
		for _, c := range cases {
			b.WriteString(c.Text)
			b.WriteByte('\n')
			count += len(c.IDs) + 1
			if count >= n {
				break
			}
		}
	}
	s := b.String()
	// Trim to exactly n tokens, so figures compare across sizes.
	ids := tok.Encode(nil, s)
	return tok.Decode(ids[:n])
}

func BenchmarkEncode(b *testing.B) {
	tok := qwen(b).Tokenizer
	for _, n := range []int{8 << 10, 32 << 10, 128 << 10} {
		text := benchText(b, n)
		dst := make([]uint32, 0, 2*n)
		b.Run(fmt.Sprintf("%dk", n>>10), func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				dst = tok.Encode(dst[:0], text)
			}
			b.ReportMetric(float64(len(dst)), "tokens")
		})
	}
}

func BenchmarkEncodeCold(b *testing.B) {
	text := benchText(b, 32<<10)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		tok := mustParse(b)
		b.StartTimer()
		tok.Encode(nil, text)
	}
}

func BenchmarkCount(b *testing.B) {
	tok := qwen(b).Tokenizer
	text := benchText(b, 32<<10)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Count(text)
	}
}
