package hf

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/text/unicode/norm"
)

// TestIncrementalSeams sends prompts in two turns cut where encoding the
// turns apart would go wrong, and holds each turn to a full encode.
func TestIncrementalSeams(t *testing.T) {
	tok := qwen(t).Tokenizer
	lead := strings.Repeat("Some words of context, then more words. ", 8)
	for _, tc := range []struct {
		name, old, add string
		reuse          bool // whether the second turn can reuse ids
	}{
		{"mid word", lead + "hel", "lo world", true},
		{"word then space", lead + "hello", " world", true},
		{"spaces before a word", lead + "x   ", "y", true},
		{"newline pair", lead + "x\r", "\nnext", true},
		{"whitespace run", lead + "x\n\n  ", "  \n\ty", true},
		{"digits", lead + "year 20", "26", true},
		{"contraction", lead + "they'", "ll go", true},
		{"added token split", lead + "<|im_", "start|>user", true},
		{"added token after", lead + "done", "<|im_end|>\n", true},
		{"combining mark", lead + "cafe", "\u0301 au lait", false},
		{"composed across", lead + "x >", "\u0338 y", false},
		{"zwj emoji", lead + "👩", "\u200d💻 codes", true},
		{"punctuation run", lead + "x !!", "!?\n\n", true},
		{"CJK", lead + "你好", "世界，再见", true},
		{"Hindi", lead + "नमस", "्ते दुनिया", true},
		{"long letters", lead + strings.Repeat("a", 300), strings.Repeat("a", 300) + " b", true},
		{"no letters", strings.Repeat("12 ", 500), "34", false},
		{"not a prefix", lead + "abc", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inc := NewIncremental(tok, 1<<20)
			first := inc.Encode(nil, "s", tc.old)
			if want := tok.Encode(nil, tc.old); !slices.Equal(first, want) {
				t.Fatalf("first turn differs from Encode at %d", firstDiff(first, want))
			}
			text := tc.old + tc.add
			if tc.name == "not a prefix" {
				text = "other " + tc.old
			}
			hits := inc.Hits()
			got := inc.Encode([]uint32{7}, "s", text)
			if reused := inc.Hits() > hits; reused != tc.reuse {
				t.Errorf("reused = %v, want %v", reused, tc.reuse)
			}
			want := append([]uint32{7}, tok.Encode(nil, text)...)
			if !slices.Equal(got, want) {
				k := firstDiff(got, want)
				t.Fatalf("second turn differs at %d: got %v, want %v", k, got[k:min(k+6, len(got))], want[k:min(k+6, len(want))])
			}
		})
	}
}

// TestIncrementalSessions grows many sessions a random cut at a time from
// the corpus and checks every turn against a full encode.
func TestIncrementalSessions(t *testing.T) {
	tok := qwen(t).Tokenizer
	cases := corpus(t)
	rng := rand.New(rand.NewPCG(1, 2))
	inc := NewIncremental(tok, 64<<20)
	for s := range 40 {
		key := string(rune('a' + s%26))
		var text strings.Builder
		for turn := range 15 {
			chunk := cases[rng.IntN(len(cases))].Text
			if len(chunk) > 0 && rng.IntN(2) == 0 {
				cut := rng.IntN(len(chunk))
				for cut > 0 && !utf8.RuneStart(chunk[cut]) {
					cut--
				}
				chunk = chunk[:cut] // cut anywhere, even between a letter and its marks
			}
			if !norm.NFC.IsNormalString(chunk) {
				chunk = norm.NFC.String(chunk)
			}
			text.WriteString(chunk)
			got := inc.Encode(nil, key, text.String())
			want := tok.Encode(nil, text.String())
			if !slices.Equal(got, want) {
				t.Fatalf("session %d turn %d: differs at %d", s, turn, firstDiff(got, want))
			}
		}
	}
	if inc.Hits() < inc.Misses() {
		t.Errorf("%d turns reused ids and %d did not: too few", inc.Hits(), inc.Misses())
	}
	t.Logf("hits %d misses %d, %d sessions in %d bytes", inc.Hits(), inc.Misses(), inc.Len(), inc.Bytes())
}

func TestIncrementalBound(t *testing.T) {
	tok := qwen(t).Tokenizer
	inc := NewIncremental(tok, 16<<10)
	text := strings.Repeat("a few words. ", 200) // about 600 tokens, 2.4 kB of ids
	for i := range 20 {
		inc.Encode(nil, string(rune('A'+i)), text)
		if b := inc.Bytes(); b > 16<<10 {
			t.Fatalf("after %d sessions the cache holds %d bytes, over its bound", i+1, b)
		}
	}
	if n := inc.Len(); n == 0 || n >= 20 {
		t.Errorf("cache holds %d sessions, want some evicted and some kept", n)
	}
	// The most recent session is kept: its next turn reuses ids.
	hits := inc.Hits()
	inc.Encode(nil, string(rune('A'+19)), text+"and more")
	if inc.Hits() != hits+1 {
		t.Error("the most recent session was not reused")
	}
	// One prompt over the bound is never kept.
	inc.Encode(nil, "huge", strings.Repeat(text, 10))
	if b := inc.Bytes(); b > 16<<10 {
		t.Errorf("cache holds %d bytes after a prompt over its bound", b)
	}
}

func TestIncrementalMetrics(t *testing.T) {
	tok := qwen(t).Tokenizer
	inc := NewIncremental(tok, 1<<20)
	text := strings.Repeat("some words, ", 20)
	inc.Encode(nil, "s", text)
	inc.Encode(nil, "s", text+"more words")
	want := fmt.Sprintf(`
# HELP turnpike_token_cache_bytes Memory the incremental token cache holds: token ids, keys and bookkeeping.
# TYPE turnpike_token_cache_bytes gauge
turnpike_token_cache_bytes{pool="qwen"} %d
# HELP turnpike_token_cache_sessions Sessions whose token ids the incremental token cache holds.
# TYPE turnpike_token_cache_sessions gauge
turnpike_token_cache_sessions{pool="qwen"} 1
# HELP turnpike_token_cache_turns_total Prompts encoded through the incremental token cache, by whether they reused a session's ids.
# TYPE turnpike_token_cache_turns_total counter
turnpike_token_cache_turns_total{pool="qwen",result="encoded"} 1
turnpike_token_cache_turns_total{pool="qwen",result="reused"} 1
`, inc.Bytes())
	if inc.Bytes() <= 0 {
		t.Fatalf("Bytes = %d", inc.Bytes())
	}
	if err := testutil.CollectAndCompare(inc.Collector(prometheus.Labels{"pool": "qwen"}), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
