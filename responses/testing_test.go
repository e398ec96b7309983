package responses

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
)

// fakeEngine is the turn path over an engine that answers chat
// completions like a vLLM engine would, as an SSE stream: it echoes the
// last user message, or calls the first tool when tools are given and the
// last message is not a tool result. It records every request body. The
// turn path is the real one (dispatch over a pools registry); only the
// engine behind it is a stand-in.
type fakeEngine struct {
	mu     sync.Mutex
	bodies [][]byte
	// contextLength is what ContextLength reports.
	contextLength int
	// block, when not nil, holds every answer until it is closed.
	block chan struct{}
	// status, when not 0, is answered with an error body instead.
	status int
	// die cuts every stream after its first chunk.
	die bool
	// seen, when not nil, is shown every turn.
	seen func(*dispatch.Spec)
	// refuse, when not nil, is asked first: an error it returns is the
	// answer.
	refuse func() error

	once sync.Once
	d    *dispatch.Dispatcher
}

// dispatcher starts the stand-in engine and the turn path to it, once.
func (f *fakeEngine) dispatcher() *dispatch.Dispatcher {
	f.once.Do(func() {
		srv := httptest.NewServer(f)
		reg, err := pools.NewRegistry([]pools.PoolConfig{{
			Name: "p", ServedModels: []string{"m", "test-model"}, Endpoints: []pools.EndpointConfig{{URL: srv.URL}},
		}}, pools.Options{}, slog.New(slog.DiscardHandler))
		if err != nil {
			panic(err)
		}
		f.d, err = dispatch.New(dispatch.Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			panic(err)
		}
	})
	return f.d
}

func (f *fakeEngine) ContextLength(string) int { return f.contextLength }

func (f *fakeEngine) Serves(tenant, model string) bool {
	return f.dispatcher().Serves(tenant, model)
}

func (f *fakeEngine) Tokenizer(string) prompt.Tokenizer { return prompt.Approx{} }

func (f *fakeEngine) requests() []chatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]chatRequest, len(f.bodies))
	for i, b := range f.bodies {
		json.Unmarshal(b, &out[i])
	}
	return out
}

func (f *fakeEngine) Begin(ctx context.Context, spec *dispatch.Spec) (*dispatch.Turn, error) {
	if f.refuse != nil {
		if err := f.refuse(); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	if f.seen != nil {
		f.seen(spec)
	}
	f.mu.Unlock()
	return f.dispatcher().Begin(ctx, spec)
}

// ServeHTTP is the stand-in engine.
func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	if f.status != 0 {
		w.WriteHeader(f.status)
		io.WriteString(w, `{"error":{"message":"This model's maximum context length is 10 tokens.","type":"BadRequestError","code":400}}`)
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if f.block != nil {
		select {
		case <-f.block:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if f.die {
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"partial "}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	writeAnswer(flushWriter{w}, &req)
}

// flushWriter flushes every chunk, as an engine streams.
type flushWriter struct{ w http.ResponseWriter }

func (fw flushWriter) Write(b []byte) (int, error) {
	n, err := fw.w.Write(b)
	fw.w.(http.Flusher).Flush()
	return n, err
}

func writeAnswer(w io.Writer, req *chatRequest) error {
	last := req.Messages[len(req.Messages)-1]
	chunk := func(v string) error {
		_, err := fmt.Fprintf(w, "data: %s\n\n", v)
		return err
	}
	if len(req.Tools) > 0 && last.Role != "tool" {
		chunk(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":%q,"arguments":""}}]}}]}`, req.Tools[0].Function.Name))
		chunk(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}`)
		chunk(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}`)
		chunk(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
	} else {
		text := "echo: " + *last.Content
		words := strings.SplitAfter(text, " ")
		for _, wd := range words {
			b, _ := json.Marshal(wd)
			chunk(fmt.Sprintf(`{"choices":[{"index":0,"delta":{"content":%s}}]}`, b))
		}
		finish := "stop"
		if req.MaxTokens != nil && *req.MaxTokens < len(words) {
			finish = "length"
		}
		chunk(fmt.Sprintf(`{"choices":[{"index":0,"delta":{},"finish_reason":%q}]}`, finish))
	}
	chunk(`{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25,"prompt_tokens_details":{"cached_tokens":16}}}`)
	return chunk("[DONE]")
}

// testStore is a StateStore over a Pebble state store of its own, which
// Close closes: what the gateway does at shutdown.
type testStore struct {
	*StateStore
	db *state.DB
}

func (s *testStore) Close() error { return s.db.Close() }

func openStore(t testing.TB, dir string) *testStore {
	t.Helper()
	return openStoreWith(t, dir, StoreOptions{})
}

func openStoreWith(t testing.TB, dir string, opts StoreOptions) *testStore {
	t.Helper()
	db, err := state.OpenPebble(dir, state.PebbleOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &testStore{StateStore: NewStore(db.Namespace("rs/"), opts), db: db}
}

// newTestService starts a service on a fresh store with eng.
func newTestService(t testing.TB, eng Engine) (*Service, *testStore) {
	t.Helper()
	st := openStore(t, t.TempDir())
	svc := New(st.StateStore, eng, Config{CollectInterval: -1})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Close(context.Background())
		st.Close()
	})
	return svc, st
}

// reopen opens the store in dir again and starts a service on it over a
// stand-in engine, as a gateway restarting does; the caller closes both.
func reopen(t testing.TB, dir string) (*Service, *testStore) {
	t.Helper()
	st := openStore(t, dir)
	svc := New(st.StateStore, &fakeEngine{}, Config{CollectInterval: -1})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return svc, st
}

func mustDecode(t testing.TB, body string) *wire.CreateRequest {
	t.Helper()
	req, err := wire.DecodeCreateRequest([]byte(body))
	if err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return req
}
