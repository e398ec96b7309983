package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/prompt/hf"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
)

// BenchmarkResponsesSession is an agent's next turn on a Responses chain
// that is already depth turns long, each turn a tool result of about 250
// Qwen3 tokens and a short answer (200 turns: about 50k tokens), counted
// and encoded with the hf tokenizer and its incremental cache, as a pool
// with `tokenizer: {kind: hf}` does. Every iteration continues the one
// before, as an agent's turns do; run it with -benchtime 20x so that the
// history stays near depth: an agent's per-turn cost is flat when ns/op
// does not grow with depth. Each turn's response is stored synced, so on
// a busy disk ns/op is mostly the wait for it; cpu-ns/op, the process's
// CPU time a turn (user and system, every goroutine's), is the gateway's
// work alone.
func BenchmarkResponsesSession(b *testing.B) {
	m, err := hf.Load("../prompt/hf/testdata/qwen3")
	if err != nil {
		b.Fatal(err)
	}
	for _, depth := range []int{25, 100, 200} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			toks := &hf.Prompts{Model: m, Incremental: hf.NewIncremental(m.Tokenizer, 64<<20)}
			st := newResponsesOnWith(b, tpresponses.Config{}, dispatch.Options{Tokenizers: map[string]prompt.Tokenizer{testModel: toks}}, http.HandlerFunc(instantChat))
			st.engine.Discard.Store(true) // what the turn costs the gateway, not a copy of each engine body
			h := st.front.Config.Handler
			prev := ""
			for i := range depth {
				prev = sessionTurn(b, h, prev, i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu, ok := processCPU()
			for i := 0; b.Loop(); i++ {
				prev = sessionTurn(b, h, prev, depth+i)
			}
			if end, _ := processCPU(); ok {
				b.ReportMetric(float64(end-cpu)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// sessionTurn sends turn i of a session continuing prev ("" for the
// first) and returns the new response's id.
func sessionTurn(b *testing.B, h http.Handler, prev string, i int) string {
	var body strings.Builder
	fmt.Fprintf(&body, `{"model":%q,"max_output_tokens":16,"store":true,`, testModel)
	if prev != "" {
		fmt.Fprintf(&body, `"previous_response_id":%q,`, prev)
	} else {
		body.WriteString(`"instructions":"You are a coding agent. Use the tools; answer briefly.",`)
	}
	fmt.Fprintf(&body, `"input":[{"role":"user","content":%q}]}`, toolResult(i))
	req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body.String()))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		b.Fatalf("turn %d: status %d: %.300s", i, w.Code, w.Body.String())
	}
	var r struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || r.ID == "" {
		b.Fatalf("turn %d: %v: %.300s", i, err, w.Body.String())
	}
	return r.ID
}

// toolResult is turn i's input: a build log of about 250 tokens that
// differs from every other turn's.
func toolResult(i int) string {
	var s strings.Builder
	fmt.Fprintf(&s, "Tool output of step %d:\n", i)
	for j := range 12 {
		fmt.Fprintf(&s, "pkg/module%d/file%d.go:%d:%d: undefined: symbol%d_%d (see build %d)\n", i%7, j, 10*i+j, j+3, i, j, i*31+j)
	}
	return s.String()
}

// TestSessionKeyOnce: a chain whose client sends x-session-id is encoded
// under the session key dispatch routes it by from its first turn on, so
// its second turn extends the first in the incremental token cache
// instead of starting over (issue 33, item 4: responses keyed its first
// turn by the response's id, dispatch by the header).
func TestSessionKeyOnce(t *testing.T) {
	m, err := hf.Load("../prompt/hf/testdata/qwen3")
	if err != nil {
		t.Fatal(err)
	}
	inc := hf.NewIncremental(m.Tokenizer, 64<<20)
	toks := &hf.Prompts{Model: m, Incremental: inc}
	st := newResponsesOnWith(t, tpresponses.Config{}, dispatch.Options{Tokenizers: map[string]prompt.Tokenizer{testModel: toks}}, http.HandlerFunc(instantChat))
	h := st.front.Config.Handler
	prev := ""
	for i := range 3 {
		var body strings.Builder
		fmt.Fprintf(&body, `{"model":%q,"max_output_tokens":16,`, testModel)
		if prev != "" {
			fmt.Fprintf(&body, `"previous_response_id":%q,`, prev)
		}
		fmt.Fprintf(&body, `"input":%q}`, toolResult(i))
		req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body.String()))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", "agent-7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var r struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || w.Code != http.StatusOK {
			t.Fatalf("turn %d: %d %s", i, w.Code, w.Body.String())
		}
		prev = r.ID
	}
	if inc.Hits() != 2 || inc.Len() != 1 {
		t.Errorf("incremental cache: %d hits over %d keys, want 2 hits (turns 2 and 3) under one key", inc.Hits(), inc.Len())
	}
}
