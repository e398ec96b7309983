package hf

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"testing"
)

// The fixtures are written by scripts/tokref (npm run fixtures) from the
// JavaScript ports of the Hugging Face tokenizers and Jinja.
var (
	qwenOnce  sync.Once
	qwenModel *Model
	qwenErr   error
)

func qwen(tb testing.TB) *Model {
	tb.Helper()
	qwenOnce.Do(func() { qwenModel, qwenErr = Load("testdata/qwen3") })
	if qwenErr != nil {
		tb.Fatal(qwenErr)
	}
	return qwenModel
}

// readJSONL decodes each line of a gzipped JSON-lines fixture into a new T.
func readJSONL[T any](tb testing.TB, path string) []T {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var out []T
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			tb.Fatalf("%s line %d: %v", path, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

type corpusCase struct {
	Text string   `json:"text"`
	IDs  []uint32 `json:"ids"`
}

func corpus(tb testing.TB) []corpusCase {
	return readJSONL[corpusCase](tb, "testdata/corpus.jsonl.gz")
}

// firstDiff is the index of the first id where a and b differ.
func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestCorpusFidelity(t *testing.T) {
	tok := qwen(t).Tokenizer
	cases := corpus(t)
	if len(cases) < 2000 {
		t.Fatalf("corpus has %d strings, want at least 2000", len(cases))
	}
	// Once with the word cache cold and once warm, and once with every
	// word merged by the heap, so both merge loops are held to the
	// reference.
	for _, pass := range []string{"cold", "warm", "heap"} {
		t.Run(pass, func(t *testing.T) {
			if pass == "heap" {
				defer func(old int) { heapThreshold = old }(heapThreshold)
				heapThreshold = 2
				tok = mustParse(t)
			}
			bad := 0
			for i, c := range cases {
				got := tok.Encode(nil, c.Text)
				if !slices.Equal(got, c.IDs) {
					bad++
					if bad <= 5 {
						k := firstDiff(got, c.IDs)
						t.Errorf("string %d %q: ids differ at %d: got %v, want %v", i, c.Text, k, got[k:min(len(got), k+8)], c.IDs[k:min(len(c.IDs), k+8)])
					}
				}
				if n := tok.Count(c.Text); n != len(c.IDs) {
					t.Errorf("string %d: Count = %d, want %d", i, n, len(c.IDs))
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d strings differ", bad, len(cases))
			}
		})
	}
}

// mustParse loads the Qwen3 tokenizer afresh, with an empty word cache.
func mustParse(tb testing.TB) *Tokenizer {
	tb.Helper()
	b, err := readMaybeGzip("testdata/qwen3/tokenizer.json")
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := ParseTokenizer(b)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}
