package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// hashProbe is round-robin that keeps the hashes and count of the last
// turn it picked for.
type hashProbe struct {
	affinity.RoundRobin
	hashes []kv.BlockHash
	tokens int
}

func (p *hashProbe) NeedsHashes() bool { return true }

func (p *hashProbe) Pick(ctx context.Context, r *affinity.Request, c []*pools.Endpoint) (*pools.Endpoint, error) {
	p.hashes, p.tokens = slices.Clone(r.Hashes), r.PromptTokens
	return p.RoundRobin.Pick(ctx, r, c)
}

// A conversation's turns read through prompt.Memo are encoded and hashed
// only past what the previous turn had, and route by exactly the hashes
// and count a full encoding gives: for histories that grow, and for one
// whose tools change (all of the render moves) and one edited mid-way.
func TestResumedPromptHashes(t *testing.T) {
	f := newFixture(t, newEngine(t, streamOK))
	probe := &hashProbe{}
	f.d.policy, f.d.needsHashes = probe, true
	memo := prompt.NewMemo(64 << 20)

	system := strings.Repeat("You are a coding agent; read before you edit. ", 500)
	var msgs []map[string]any
	msgs = append(msgs, map[string]any{"role": "system", "content": system}, map[string]any{"role": "user", "content": "Fix the build."})
	tools := `[{"type":"function","function":{"name":"read_file"}}]`
	for turn := range 10 {
		if turn == 6 {
			tools = `[{"type":"function","function":{"name":"read"}}]`
		}
		if turn == 8 {
			msgs[3]["content"] = "edited"
		}
		raw, _ := json.Marshal(msgs)
		body := []byte(fmt.Sprintf(`{"model":%q,"messages":%s,"tools":%s}`, testModel, raw, tools))
		req, err := memo.ParseChat(body)
		if err != nil {
			t.Fatal(err)
		}
		spec := &Spec{Tenant: "acme", Model: testModel, Path: "/v1/chat/completions", Body: body, Prompt: &req.Prompt, Prior: req.Prior}
		tr, err := f.d.Begin(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		tr.End(nil)

		tokens := prompt.Encode(prompt.Approx{}, nil, &req.Prompt)
		want := (&kv.Hasher{}).HashTokens(nil, testModel, tokens)
		if probe.tokens != len(tokens) || !slices.Equal(probe.hashes, want) {
			t.Fatalf("turn %d: routed by %d tokens and %d hashes, want %d and %d (equal: %v)",
				turn, probe.tokens, len(probe.hashes), len(tokens), len(want), slices.Equal(probe.hashes, want))
		}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"function": map[string]any{"name": "read_file", "arguments": fmt.Sprintf(`{"path":"f%d"}`, turn)}}}},
			map[string]any{"role": "tool", "content": strings.Repeat(fmt.Sprintf("line %d\n", turn), 40)})
	}
	if n := testutil.ToFloat64(f.d.resumedTokens); n < 5000 {
		t.Errorf("%v tokens resumed, want most of every prompt after the second", n)
	}
}
