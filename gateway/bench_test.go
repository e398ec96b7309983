package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// This file must build at older revisions too: scripts/benchcmp.sh copies
// it into a worktree of the old code, so that old and new run the same
// benchmarks. It therefore reaches the gateway only through its HTTP
// handler and the helpers of gateway_test.go and responses_test.go, and
// generates its bodies itself rather than through package bench.

// BenchmarkProxyChat measures the gateway's own cost per chat completion:
// decode, route, forward, relay, against an engine that answers at once.
// "small" is a one-message chat; "168KB" an agent's request deep into a
// session (system prompt, tool schema, tool-call history), where the
// per-byte costs of decoding, hashing and copying the body dominate.
func BenchmarkProxyChat(b *testing.B) {
	for _, stream := range []bool{false, true} {
		mode := "non-stream"
		small := chatBody
		if stream {
			mode = "stream"
			small = `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		for _, size := range []struct{ name, body string }{
			{"small", small},
			{"168KB", agentChat(stream, 168<<10)},
		} {
			b.Run(mode+"/"+size.name, func(b *testing.B) {
				benchChat(b, nil, size.body, stream)
			})
			// The default policy: prompts are encoded, hashed and matched
			// against the KV index on every request.
			b.Run("cache-aware/"+mode+"/"+size.name, func(b *testing.B) {
				benchChat(b, cacheAware(b), size.body, stream)
			})
		}
		// An agent's session: each request is the next turn, the
		// session's history and one new message. "cold": every request
		// opens a session of its own, so nothing of it was seen before.
		// "shared-prompt": the sessions share their system prompt, as
		// an agent's do, and differ from their task on, 16 at once.
		for _, turns := range []struct {
			name         string
			cold, shared bool
		}{{"168KB-next-turn", false, false}, {"168KB-cold", true, false}, {"168KB-next-turn-shared-prompt", false, true}} {
			b.Run("cache-aware/"+mode+"/"+turns.name, func(b *testing.B) {
				benchTurns(b, cacheAware(b), agentChat(stream, 168<<10), stream, turns.cold, turns.shared)
			})
		}
	}
}

// benchTurns is benchChat with each request a new turn of a session made
// from body: its system prompt names the session (one a goroutine,
// or one a request when cold), or with shared its first user message
// does, and a last message, new each time, is added.
func benchTurns(b *testing.B, policy affinity.Policy, body string, stream, cold, shared bool) {
	s, _, _ := newGateway(b, policy, newBackend(b, instantChat))
	h := s.Handler()
	const opening = `"content":"`
	open := strings.Index(body, opening+"You are a coding agent.") + len(opening)
	if shared {
		// The user message after the system prompt (json.Marshal sorts
		// the keys).
		const user = `"role":"system"},{"content":"`
		open = strings.Index(body, user) + len(user)
		b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	}
	end := strings.LastIndex(body, `],"model":`)
	if open < len(opening) || end < open {
		b.Fatal("the agent body has no system prompt, user message or messages end")
	}
	var sessions atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var buf []byte
		session := sessions.Add(1)
		for turn := 0; pb.Next(); turn++ {
			if cold {
				session = sessions.Add(1)
			}
			buf = fmt.Appendf(append(buf[:0], body[:open]...), "session %d. ", session)
			buf = append(buf, body[open:end]...)
			buf = fmt.Appendf(buf, `,{"role":"user","content":"turn %d: go on."}`, turn)
			buf = append(buf, body[end:]...)
			serveBytesOK(b, h, "/v1/chat/completions", buf, stream)
		}
	})
}

func benchChat(b *testing.B, policy affinity.Policy, body string, stream bool) {
	s, _, _ := newGateway(b, policy, newBackend(b, instantChat))
	h := s.Handler()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			serveOK(b, h, "/v1/chat/completions", body, stream)
		}
	})
}

// cacheAware is the default routing policy with its KV index and sessions.
func cacheAware(tb testing.TB) affinity.Policy {
	tb.Helper()
	metrics := prometheus.NewRegistry()
	sess, err := sessions.NewStore(sessions.Options{Metrics: metrics})
	if err != nil {
		tb.Fatal(err)
	}
	var routing affinity.Config
	routing.EnsureDefaults()
	p, err := affinity.NewPolicy(routing, affinity.Deps{Index: kv.NewIndex(kv.IndexOptions{}), Hasher: &kv.Hasher{}, Sessions: sess, Metrics: metrics})
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// BenchmarkResponsesTurn measures one Responses API turn through the
// gateway: decode, render the chat, route, relay and translate the
// engine's stream, store the response in the state store (a real one, on
// disk) and answer, streamed or not.
func BenchmarkResponsesTurn(b *testing.B) {
	for _, stream := range []bool{false, true} {
		mode := "non-stream"
		if stream {
			mode = "stream"
		}
		body := fmt.Sprintf(`{"model":%q,"instructions":"You are a careful assistant. Answer briefly.",`+
			`"input":[{"role":"user","content":"Summarise the build failure below in one line.\n\nerror: undefined: frobnicate\n\tat main.go:42"}],`+
			`"max_output_tokens":16,"stream":%v}`, testModel, stream)
		b.Run(mode, func(b *testing.B) {
			st := newResponsesStack(b, 0)
			// The stack's engine is a recorder in front of a simulated
			// engine, whose own work would be a third of what is measured;
			// it answers instantChat instead. No request has been sent yet,
			// and the stack's registry runs no scrapes.
			st.engine.H = http.HandlerFunc(instantChat)
			h := st.front.Config.Handler
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					serveOK(b, h, "/v1/responses", body, stream)
				}
			})
		})
	}
}

// BenchmarkStreamBurst measures a streamed answer whose tokens the engine
// sent faster than the gateway read them (here all at once, 256 tokens),
// on a real loopback connection to a client that reads it whole: the chat
// relay and the Responses stream, each writing to the client for every
// event or for every burst.
func BenchmarkStreamBurst(b *testing.B) {
	const tokens = 256
	run := func(b *testing.B, url, body string) {
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := http.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n < tokens*20 {
					b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
				}
			}
		})
	}
	b.Run("chat", func(b *testing.B) {
		_, front, _ := newGateway(b, nil, newBackend(b, burstEngine(tokens)))
		run(b, front.URL+"/v1/chat/completions", `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	})
	b.Run("responses", func(b *testing.B) {
		st := newResponsesStack(b, 0)
		st.engine.H = burstEngine(tokens)
		run(b, st.front.URL+"/v1/responses", `{"model":"test-model","input":"hi","stream":true}`)
	})
}

// burstEngine streams tokens chat chunks in one write, as an engine does
// whose tokens came faster than the gateway read them.
func burstEngine(tokens int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			return
		}
		io.Copy(io.Discard, r.Body)
		var b strings.Builder
		for i := range tokens {
			fmt.Fprintf(&b, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
		}
		b.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		b.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":40,\"total_tokens\":45}}\n\ndata: [DONE]\n\n")
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, b.String())
	}
}

// serveOK sends one POST to h and fails the benchmark unless it is
// answered 200 (a streamed answer: 200 and an event stream).
func serveOK(b *testing.B, h http.Handler, path, body string, stream bool) {
	serve(b, h, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)), stream)
}

func serveBytesOK(b *testing.B, h http.Handler, path string, body []byte, stream bool) {
	serve(b, h, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)), stream)
}

func serve(b *testing.B, h http.Handler, req *http.Request, stream bool) {
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		b.Fatalf("status %d: %.300s", w.Code, w.Body.String())
	}
	if stream && !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		b.Fatalf("asked for a stream, got %q: %.300s", w.Header().Get("Content-Type"), w.Body.String())
	}
}

var instantBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// instantChat is an engine that answers at once and costs little, so that
// the benchmark measures the gateway: it reads the body into a pooled
// buffer and looks for the stream flag instead of decoding it (the
// gateway forwards compact JSON, and the benchmark bodies hold no other
// "stream" key), and writes fixed answers with usage.
func instantChat(w http.ResponseWriter, r *http.Request) {
	buf := instantBufs.Get().(*bytes.Buffer)
	defer instantBufs.Put(buf)
	buf.Reset()
	buf.ReadFrom(r.Body)
	if !bytes.Contains(buf.Bytes(), []byte(`"stream":true`)) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(instantAnswer)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range instantEvents {
		w.Write(ev)
		w.(http.Flusher).Flush()
	}
}

var instantAnswer = []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"test-model","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":8}}}`)

var instantEvents = func() [][]byte {
	const head = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"test-model","choices":[`
	return [][]byte{
		[]byte(head + `{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"),
		[]byte(head + `{"index":0,"delta":{"content":"hello"},"finish_reason":null}]}` + "\n\n"),
		[]byte(head + `{"index":0,"delta":{"content":" there"},"finish_reason":null}]}` + "\n\n"),
		[]byte(head + `{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"),
		[]byte(head + `],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":8}}}` + "\n\n"),
		[]byte("data: [DONE]\n\n"),
	}
}()

// agentChat is a chat completion request of at least size bytes shaped
// like a coding agent's: system prompt, tools, then assistant tool calls
// each answered by a tool message holding source text (newlines, tabs,
// quotes: what JSON escapes). Fixed seed: the same body every run.
func agentChat(stream bool, size int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		const letters = "etaoinshrdlucmfwypvbgkqjxz"
		n := 2 + rng.IntN(7)
		b := make([]byte, n)
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	sentence := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = word()
		}
		return strings.Join(s, " ")
	}
	type m = map[string]any
	var tools []m
	for _, name := range []string{"read_file", "grep", "edit_file", "run_tests", "shell"} {
		tools = append(tools, m{"type": "function", "function": m{
			"name": name, "description": sentence(50),
			"parameters": m{"type": "object", "required": []string{"path"}, "properties": m{
				"path": m{"type": "string", "description": sentence(10)}}},
		}})
	}
	msgs := []m{
		{"role": "system", "content": "You are a coding agent.\n\n" + sentence(3000)},
		{"role": "user", "content": sentence(80)},
	}
	req := m{"model": testModel, "stream": stream, "max_tokens": 64, "tools": tools}
	for n := 0; ; n++ {
		req["messages"] = msgs
		b, _ := json.Marshal(req)
		if len(b) >= size {
			return string(b)
		}
		id := fmt.Sprintf("call_%03d", n)
		var src strings.Builder
		for i := range 60 {
			fmt.Fprintf(&src, "%4d\tif err := %s.%s(%q); err != nil {\n\t\treturn fmt.Errorf(\"%s: %%w\", err)\n\t}\n", i, word(), word(), sentence(2), word())
		}
		msgs = append(msgs,
			m{"role": "assistant", "content": sentence(20), "tool_calls": []m{{
				"id": id, "type": "function",
				"function": m{"name": "read_file", "arguments": fmt.Sprintf(`{"path":"src/%s.go"}`, word())},
			}}},
			m{"role": "tool", "tool_call_id": id, "content": src.String()})
	}
}
