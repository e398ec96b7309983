package hf

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/turnpike-gateway/turnpike/prompt"
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

// BenchmarkEncodeCold encodes 32k tokens with an empty word cache: text
// of words never seen before.
func BenchmarkEncodeCold(b *testing.B) {
	text := benchText(b, 32<<10)
	tok := *qwen(b).Tokenizer
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		tok.cache = newWordCache(cacheSlots)
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

// BenchmarkIncrementalTurn is one agent turn: a 32k-token session grows by
// about 1k tokens. Each iteration restores the session as the last turn
// left it (ids and their capacity) with the timer stopped, so every turn
// extends the same 32k tokens. p50-ns is the median turn.
func BenchmarkIncrementalTurn(b *testing.B) {
	tok := qwen(b).Tokenizer
	base := benchText(b, 32<<10)
	prev := tok.Decode(tok.Encode(nil, base)[:31<<10])
	cases := corpus(b)
	var more strings.Builder
	for i := len(cases) - 1; more.Len() < 16<<10; i-- {
		more.WriteString(cases[i].Text)
	}
	full := base + "\n" + tok.Decode(tok.Encode(nil, more.String())[:1<<10])
	inc := NewIncremental(tok, 1<<30)
	inc.Encode(nil, "s", prev)
	inc.Encode(nil, "s", base) // the ids now have the capacity a real turn leaves
	saved := inc.take("s")
	savedIDs := slices.Clone(saved.ids[:len(saved.ids):cap(saved.ids)])
	savedIDs = savedIDs[:len(saved.ids)]
	inc.remember(saved, len(base), xxhash.Sum64String(base))
	dst := make([]uint32, 0, 64<<10)
	var times []time.Duration
	hits := inc.Hits()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := inc.take("s")
		if s == nil {
			s = &session{key: "s"}
		}
		s.ids = append(s.ids[:0], savedIDs...)
		inc.remember(s, len(base), xxhash.Sum64String(base))
		b.StartTimer()
		start := time.Now()
		dst = inc.Encode(dst[:0], "s", full)
		times = append(times, time.Since(start))
	}
	if inc.Hits()-hits != uint64(len(times)) {
		b.Fatalf("%d of %d turns reused the session", inc.Hits()-hits, len(times))
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(len(dst)-len(savedIDs)), "new-tokens")
}

// benchChat is a conversation with tools of about n tokens, messages of
// the fixture chats one after another.
func benchChat(tb testing.TB, n int) ([]prompt.Message, []byte) {
	tb.Helper()
	m := qwen(tb)
	cases := chats(tb)
	var msgs []prompt.Message
	for count := 0; count < n; {
		for _, c := range cases {
			for _, msg := range c.prompt() {
				if msg.Role == "system" && len(msgs) > 0 {
					continue
				}
				msgs = append(msgs, msg)
				count += m.Tokenizer.Count(msg.Content) + 8
			}
			if count >= n {
				break
			}
		}
	}
	return msgs, cases[0].Tools
}

func BenchmarkRender(b *testing.B) {
	m := qwen(b)
	for _, r := range renderers {
		for _, n := range []int{2 << 10, 32 << 10} {
			msgs, tools := benchChat(b, n)
			b.Run(fmt.Sprintf("%s/%dk", r.name, n>>10), func(b *testing.B) {
				benchRender(b, m, r.render, msgs, tools)
			})
		}
	}
}

func benchRender(b *testing.B, m *Model, render func(*Template, []prompt.Message, []byte, bool) (string, error), msgs []prompt.Message, tools []byte) {
	b.ReportAllocs()
	var out string
	for b.Loop() {
		var err error
		if out, err = render(m.Template, msgs, tools, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(msgs)), "messages")
	b.ReportMetric(float64(m.Tokenizer.Count(out)), "tokens")
}

// BenchmarkRenderEncode is a turn's prompt rendered by the template and
// encoded whole: 32k tokens of chat with tools.
func BenchmarkRenderEncode(b *testing.B) {
	m := qwen(b)
	msgs, tools := benchChat(b, 32<<10)
	dst := make([]uint32, 0, 64<<10)
	b.ReportAllocs()
	for b.Loop() {
		out, err := m.Template.Render(msgs, tools, true)
		if err != nil {
			b.Fatal(err)
		}
		dst = m.Tokenizer.Encode(dst[:0], out)
	}
}
