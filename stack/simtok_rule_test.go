package stack

import (
	"slices"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// The simulator tokenizes and hashes blocks by its own copy of the
// gateway's approximate rule (it imports nothing of the gateway's): the
// two give the same ids for every length of text, ASCII and not, and the
// same block hashes, so that against simulated engines the gateway's
// prediction of cached tokens is exact.
func TestSimTokenizerIsApprox(t *testing.T) {
	text := strings.Repeat("héllo wörld, \x00 tabs\tand \"quotes\" ", 40)
	for n := 0; n <= len(text); n++ {
		got, want := sim.Tokenize(text[:n]), (prompt.Approx{}).Encode(nil, text[:n])
		if !slices.Equal(got, want) {
			t.Fatalf("%d bytes: the simulator's ids %v differ from the gateway's %v", n, got[:min(len(got), 4)], want[:min(len(want), 4)])
		}
	}
	ids := prompt.Approx{}.Encode(nil, text)
	var h kv.Hasher
	hashes := h.HashTokensFrom(nil, 0, ids)
	bs := h.BlockTokens()
	var parent uint64
	for i, got := range hashes {
		want := sim.BlockHash(parent, ids[i*bs:(i+1)*bs])
		if uint64(got) != want {
			t.Fatalf("block %d: the gateway's hash %x, the simulator's %x", i, got, want)
		}
		parent = want
	}
}
