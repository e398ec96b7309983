package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/prompt/hf"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// agentHistory is an agent's conversation of about tokens tokens: a
// system prompt, then rounds of a request, a tool-like result of code
// and JSON, and an answer.
func agentHistory(tok *hf.Tokenizer, tokens int) []prompt.Message {
	msgs := []prompt.Message{{Role: "system", Content: "You are a coding agent. Read files, run tests, and fix what fails; explain each change briefly."}}
	n := 0
	for round := 0; n < tokens; round++ {
		var code strings.Builder
		for i := range 40 {
			fmt.Fprintf(&code, "func step%d_%d(x int) int { return x*%d + %d } // überprüft ✓\n", round, i, i+1, round)
		}
		round := []prompt.Message{
			{Role: "user", Content: fmt.Sprintf("Round %d: open internal/step%d.go and tell me what fails.", round, round)},
			{Role: "assistant", Content: fmt.Sprintf(`{"file":"internal/step%d.go","lines":40,"status":"read"}`, round) + "\n" + code.String()},
			{Role: "user", Content: fmt.Sprintf("Tests: ok for %d cases, 1 failure in step%d_7; 日本語のコメントも確認して。", 40, round)},
			{Role: "assistant", Content: fmt.Sprintf("step%d_7 multiplies by 8 where the test expects 7. I will change it and rerun.", round)},
		}
		for _, m := range round {
			n += tok.Count(m.Content) + 4
		}
		msgs = append(msgs, round...)
	}
	return msgs
}

// BenchmarkRouteNextTurn is the routing decision of an agent's next turn
// on a 32k-token session with tokenizer kind hf: the prompt rendered by
// Qwen3's chat template, encoded incrementally from the previous turn's
// seam (hf.Incremental under the session key), cut into block hashes, and
// a cache-aware pick over 8 endpoints whose index holds the previous turn.
// Each iteration first encodes the previous turn again, untimed, so every
// timed turn extends its session by the same suffix (about 1k tokens).
func BenchmarkRouteNextTurn(b *testing.B) {
	m, err := hf.Load("../prompt/hf/testdata/qwen3")
	if err != nil {
		b.Fatal(err)
	}
	var eps []pools.EndpointConfig
	for i := range 8 {
		eps = append(eps, pools.EndpointConfig{URL: fmt.Sprintf("http://10.0.0.%d:8000", i+1)})
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{testModel}, Endpoints: eps}}, pools.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour)})
	}
	index := kv.NewIndex(kv.IndexOptions{})
	sess, err := sessions.NewStore(sessions.Options{})
	if err != nil {
		b.Fatal(err)
	}
	hasher := &kv.Hasher{}
	policy, err := affinity.NewPolicy(affinity.Config{}, affinity.Deps{Index: index, Hasher: hasher, Sessions: sess, Metrics: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	tok := &hf.Prompts{Model: m, Incremental: hf.NewIncremental(m.Tokenizer, 64<<20)}
	d, err := New(Options{Registry: reg, Policy: policy, Hasher: hasher, Tokenizers: map[string]prompt.Tokenizer{testModel: tok}})
	if err != nil {
		b.Fatal(err)
	}

	// The previous turn's prompt ends in a user message; the next one
	// carries the answer to it, and the new request.
	history := agentHistory(m.Tokenizer, 31<<10)
	prev := &prompt.Prompt{Model: testModel, Messages: history[:len(history)-1]}
	var suffix strings.Builder
	for i := range 60 {
		fmt.Fprintf(&suffix, "--- FAIL: TestStep%d (0.00s)\n    step_test.go:%d: got %d, want %d\n", i, 10+i, i*8, i*7)
	}
	next := &prompt.Prompt{Model: testModel, Messages: append(slices.Clip(history), prompt.Message{Role: "user", Content: suffix.String()})}
	const key = "agent-session"
	prevIDs := tok.EncodePrompt(nil, prev, key)
	index.Record(3, kv.HBM, hasher.HashTokens(nil, testModel, prevIDs))
	spec := &Spec{Tenant: "acme", Model: testModel, Prompt: next}
	candidates := reg.EndpointsFor(nil, testModel)
	ctx := context.Background()

	route := func() (*pools.Endpoint, int) {
		t := &Turn{ctx: ctx, d: d, spec: spec, sessionKey: key}
		t.route = affinity.Request{Model: testModel, Tenant: "acme", SessionKey: key}
		t.countPrompt()
		t.bufs.hashes = d.hasher.HashTokens(t.bufs.hashes[:0], testModel, t.tokens)
		t.route.Hashes = t.bufs.hashes
		ep, err := d.policy.Pick(ctx, &t.route, candidates)
		if err != nil {
			b.Fatal(err)
		}
		d.policy.Done(&t.route, ep, affinity.Outcome{Err: context.Canceled})
		n := t.route.PromptTokens
		bufferPool.Put(t.bufs)
		return ep, n
	}
	ep, tokens := route()
	if ep.Index != 3 {
		b.Fatalf("picked endpoint %d, want 3, which holds the session", ep.Index)
	}
	if want := len(m.Tokenizer.Encode(nil, must(m.Render(next)))); tokens != want {
		b.Fatalf("routed %d tokens, want the whole encode's %d", tokens, want)
	}
	if tok.Incremental.Hits() != 1 {
		b.Fatalf("the next turn was encoded whole: %d reuses", tok.Incremental.Hits())
	}
	durations := make([]time.Duration, 0, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tok.EncodePrompt(prevIDs[:0], prev, key) // the session is at the previous turn again
		b.StartTimer()
		start := time.Now()
		route()
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(tokens), "prompt-tokens")
	b.ReportMetric(float64(tokens-len(prevIDs)), "new-tokens")
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}
