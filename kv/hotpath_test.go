package kv

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// agentPrompt is an agent turn of about tokens approximate tokens: a system
// prompt, a tools array and a growing tool-call loop.
func agentPrompt(tokens int) *prompt.Prompt {
	p := &prompt.Prompt{
		Model: "llama-3.1-8b",
		Tools: []byte(`[{"type":"function","function":{"name":"bash","description":"run a command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}}]`),
		Messages: []prompt.Message{
			{Role: "system", Content: strings.Repeat("You are a careful coding agent. ", 32)},
		},
	}
	for i := 0; len(prompt.AppendRender(nil, p)) < tokens*prompt.ApproxBytesPerToken; i++ {
		p.Messages = append(p.Messages,
			prompt.Message{Role: "user", Content: fmt.Sprintf("step %d: run the tests and fix what fails", i)},
			prompt.Message{Role: "assistant", ToolCalls: []prompt.ToolCall{{Name: "bash", Arguments: `{"cmd":"go test ./..."}`}}},
			prompt.Message{Role: "tool", Content: strings.Repeat(fmt.Sprintf("--- FAIL: TestCase%d (0.00s)\n", i), 12)},
		)
	}
	return p
}

func TestHashPromptAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	var h Hasher
	p := agentPrompt(8192)
	dst := make([]BlockHash, 0, 1024)
	toks := make([]uint32, 0, 16<<10)
	hash := func() {
		toks = prompt.Encode(nil, toks[:0], p)
		dst = h.HashTokens(dst[:0], p.Model, toks)
	}
	hash() // warm the pools and the tools cache
	if n := testing.AllocsPerRun(100, hash); n != 0 {
		t.Fatalf("encoding and hashing a prompt allocates %v times per call", n)
	}
}

func TestMatchPrefixAllocs(t *testing.T) {
	ix, query := benchIndex(4)
	out := make([]Match, 64)
	if n := testing.AllocsPerRun(100, func() { ix.MatchPrefix(query, out) }); n != 0 {
		t.Fatalf("MatchPrefix allocates %v times per call", n)
	}
	if out[0].Blocks != len(query) {
		t.Fatalf("endpoint 0 matches %d of %d blocks", out[0].Blocks, len(query))
	}
}

// benchIndex builds an index of 64 endpoints and 100k distinct blocks: 200
// chains of 500 blocks, each held by holders endpoints, most of them a
// shorter prefix. It returns the index and a chain endpoint 0 holds whole.
func benchIndex(holders int) (*Index, []BlockHash) {
	const endpoints, chains, length = 64, 200, 500
	rng := rand.New(rand.NewPCG(1, 2))
	var h Hasher
	ix := NewIndex(IndexOptions{})
	tokens := make([]uint32, length*DefaultBlockSize)
	var query []BlockHash
	for c := range chains {
		for i := range tokens {
			tokens[i] = rng.Uint32N(prompt.ApproxVocabSize)
		}
		chain := h.HashTokens(nil, "m", tokens)
		if c == 0 {
			query = chain
		}
		for j := range holders {
			ep := (c*7 + j) % endpoints
			n := length - rng.IntN(length)
			if j == 0 {
				n = length
			}
			ix.Record(ep, Tier(j%2), chain[:n])
		}
	}
	return ix, query
}

func BenchmarkHashPrompt(b *testing.B) {
	var h Hasher
	p := agentPrompt(8192)
	b.SetBytes(int64(len(prompt.AppendRender(nil, p))))
	dst := make([]BlockHash, 0, 1024)
	toks := make([]uint32, 0, 16<<10)
	b.ReportAllocs()
	for b.Loop() {
		toks = prompt.Encode(nil, toks[:0], p)
		dst = h.HashTokens(dst[:0], p.Model, toks)
	}
	b.ReportMetric(float64(len(dst)), "blocks")
}

func BenchmarkMatchPrefix(b *testing.B) {
	for _, holders := range []int{4, 64} {
		b.Run(fmt.Sprintf("holders=%d", holders), func(b *testing.B) {
			ix, query := benchIndex(holders)
			if ix.Len() != 100_000 {
				b.Fatalf("index holds %d blocks", ix.Len())
			}
			out := make([]Match, 64)
			b.ReportAllocs()
			for b.Loop() {
				ix.MatchPrefix(query, out)
			}
		})
	}
}

// BenchmarkRecord is the write routing does on every turn: a 500-block chain.
func BenchmarkRecord(b *testing.B) {
	ix, query := benchIndex(4)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ix.Record(i%64, HBM, query)
		i++
	}
}

// BenchmarkNextTurn is what routing does with an agent's next turn on a
// closed endpoint: a 2,700-block chain (about 43k tokens) whose prefix the
// endpoint holds, matched and recorded with one new block, among 16 such
// sessions.
func BenchmarkNextTurn(b *testing.B) {
	const sessions, blocks = 16, 2700
	ix := NewIndex(IndexOptions{DefaultCapacity: 1 << 20})
	chains := make([][]BlockHash, sessions)
	for s := range chains {
		for i := range blocks {
			chains[s] = append(chains[s], BlockHash(uint64(s)<<32|uint64(i)+1))
		}
		ix.RecordChain(0, chains[s])
	}
	out := make([]Match, 4)
	b.ReportAllocs()
	turn := 0
	for b.Loop() {
		s := turn % sessions
		chains[s] = append(chains[s][:blocks], BlockHash(1<<60|uint64(turn)))
		if n := ix.MatchPrefix(chains[s], out); n != blocks {
			b.Fatalf("matched %d of %d", n, blocks)
		}
		ix.RecordChain(0, chains[s])
		turn++
	}
}

// BenchmarkHashTokens chains the blocks of an agent prompt of about 43k
// tokens, the size of a long agent turn.
func BenchmarkHashTokens(b *testing.B) {
	var h Hasher
	tokens := prompt.Encode(nil, nil, agentPrompt(43000))
	dst := make([]BlockHash, 0, 4096)
	b.SetBytes(int64(4 * len(tokens)))
	b.ReportAllocs()
	for b.Loop() {
		dst = h.HashTokens(dst[:0], "m", tokens)
	}
	b.ReportMetric(float64(len(dst)), "blocks")
}

// BenchmarkMatchPrefixSharedTier matches a 500-block chain that 16 pools
// of 4 replicas hold in their shared tiers, reported by one replica each,
// so every block advances 64 endpoints through 16 group holders.
func BenchmarkMatchPrefixSharedTier(b *testing.B) {
	ix, query := benchIndex(4)
	for ep := range 64 {
		ix.SetGroup(ep, ep/4)
	}
	for g := range 16 {
		ix.Record(4*g, Shared, query)
	}
	out := make([]Match, 64)
	if ix.MatchPrefix(query, out); out[63].Blocks != len(query) {
		b.Fatalf("replica 63 matched %d of %d blocks", out[63].Blocks, len(query))
	}
	b.ReportAllocs()
	for b.Loop() {
		ix.MatchPrefix(query, out)
	}
}
