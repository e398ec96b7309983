package hf

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestConcurrent encodes the corpus from several goroutines on a cold
// word cache, and grows shared sessions from several goroutines at once;
// every result must still be the reference's. Run with -race.
func TestConcurrent(t *testing.T) {
	tok := mustParse(t)
	cases := corpus(t)
	inc := NewIncremental(tok, 8<<20)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(cases); i += 4 {
				if got := tok.Encode(nil, cases[i].Text); !slices.Equal(got, cases[i].IDs) {
					t.Errorf("string %d differs", i)
					return
				}
			}
		})
		wg.Go(func() {
			var text strings.Builder
			for i := range 60 {
				text.WriteString(cases[(i*7+g)%len(cases)].Text)
				key := string(rune('a' + i%3)) // keys shared between goroutines
				s := text.String()
				if got, want := inc.Encode(nil, key, s), tok.Encode(nil, s); !slices.Equal(got, want) {
					t.Errorf("goroutine %d turn %d differs at %d", g, i, firstDiff(got, want))
					return
				}
			}
		})
	}
	wg.Wait()
}
