package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// gate holds the chat completions an engine is sent while it is shut,
// so that a test can stop the store in the middle of a turn.
type gate struct {
	h  http.Handler
	mu sync.Mutex
	// shut, while not nil, holds every request until it is closed;
	// arrived hears of each request it holds.
	shut    chan struct{}
	arrived chan struct{}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/chat/completions" {
		g.mu.Lock()
		shut, arrived := g.shut, g.arrived
		g.mu.Unlock()
		if shut != nil {
			arrived <- struct{}{}
			<-shut
		}
	}
	g.h.ServeHTTP(w, r)
}

// hold shuts the gate: it returns the channel that hears of each request
// held, and the function that opens the gate again.
func (g *gate) hold() (arrived <-chan struct{}, open func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut, g.arrived = make(chan struct{}), make(chan struct{}, 64)
	shut := g.shut
	return g.arrived, func() {
		g.mu.Lock()
		g.shut = nil
		g.mu.Unlock()
		close(shut)
	}
}

// outageStack is a gateway with the Responses API on a real redis-server
// (state on Redis, as several gateways share it) over a simulated engine
// behind a gate, with an OpenAI SDK client that does not retry.
type outageStack struct {
	redis  *redistest.Server
	front  *httptest.Server
	client openai.Client
	engine *recorder
	gate   *gate
}

func newOutageStack(t *testing.T) *outageStack {
	t.Helper()
	srv := redistest.Start(t)
	log := slog.New(slog.DiscardHandler)
	// A quick probe: the test sees Redis back within a tenth of a second.
	db, err := state.OpenRedis(context.Background(), srv.URL(), state.RedisOptions{HealthInterval: 100 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := sim.New(sim.Config{ServedModelName: testModel})
	if err != nil {
		t.Fatal(err)
	}
	st := &outageStack{redis: srv, gate: &gate{h: eng.Handler()}}
	st.engine = &recorder{h: st.gate}
	backend := httptest.NewServer(st.engine)
	reg, err := pools.NewRegistry([]pools.PoolConfig{{
		Name: "p", Model: "llama-3.1-8b", ServedModels: []string{testModel}, Endpoints: []pools.EndpointConfig{{URL: backend.URL}},
	}}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	svc := tpresponses.New(tpresponses.NewStore(db.Namespace("rs/"), tpresponses.StoreOptions{}), d,
		tpresponses.Config{CollectInterval: -1, Logger: log})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, Dispatch: d, Logger: log, Responses: svc, StoreHealth: db.Health})
	if err != nil {
		t.Fatal(err)
	}
	st.front = httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		st.front.Close()
		svc.Close()
		db.Close()
		backend.Close()
		eng.Close()
	})
	st.client = openai.NewClient(option.WithBaseURL(st.front.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	return st
}

// waitReady polls /readyz until it answers want.
func (st *outageStack) waitReady(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(st.front.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz answered %d for fifteen seconds, want %d", resp.StatusCode, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (st *outageStack) create(ctx context.Context, input string, prev string) (*responses.Response, error) {
	p := responses.ResponseNewParams{Model: testModel, Input: text(input), MaxOutputTokens: openai.Int(16)}
	if prev != "" {
		p.PreviousResponseID = openai.String(prev)
	}
	return st.client.Responses.New(ctx, p)
}

// wantStoreUnavailable checks that err is the SDK's error for a 503
// store_unavailable with Retry-After.
func wantStoreUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("%s: %v, want an API error", what, err)
	}
	if apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != "store_unavailable" || apiErr.Response.Header.Get("Retry-After") == "" {
		t.Errorf("%s: %d %q, Retry-After %q; want 503 store_unavailable with Retry-After",
			what, apiErr.StatusCode, apiErr.Code, apiErr.Response.Header.Get("Retry-After"))
	}
}

// TestSDKStoreOutage (issue 32, item 3): with the Redis store down, every
// Responses and Conversations route answers 503 store_unavailable with
// Retry-After, a create is refused before any engine is asked, and
// /readyz says not ready; with Redis back, the gateway is ready again and
// what was stored before the outage is all there.
func TestSDKStoreOutage(t *testing.T) {
	ctx := context.Background()
	st := newOutageStack(t)
	r1, err := st.create(ctx, "The secret word is pelican.", "")
	if err != nil || r1.Status != responses.ResponseStatusCompleted {
		t.Fatalf("before the outage: %+v, %v", r1, err)
	}
	conv, err := st.client.Conversations.New(ctx, conversations.ConversationNewParams{})
	if err != nil {
		t.Fatal(err)
	}
	st.waitReady(t, http.StatusOK)

	st.redis.Kill()
	st.waitReady(t, http.StatusServiceUnavailable)
	asked := st.engine.count()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"create", func() error { _, err := st.create(ctx, "hi", ""); return err }},
		{"create, continuing", func() error { _, err := st.create(ctx, "And?", r1.ID); return err }},
		{"create, streamed", func() error {
			s := st.client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: testModel, Input: text("hi")})
			defer s.Close()
			for s.Next() {
				t.Errorf("an event while the store is down: %s", s.Current().Type)
			}
			return s.Err()
		}},
		{"create, background", func() error {
			_, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text("hi"), Background: openai.Bool(true)})
			return err
		}},
		{"get", func() error { _, err := st.client.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{}); return err }},
		{"delete", func() error { return st.client.Responses.Delete(ctx, r1.ID) }},
		{"input items", func() error {
			_, err := st.client.Responses.InputItems.List(ctx, r1.ID, responses.InputItemListParams{})
			return err
		}},
		{"create conversation", func() error {
			_, err := st.client.Conversations.New(ctx, conversations.ConversationNewParams{})
			return err
		}},
		{"get conversation", func() error { _, err := st.client.Conversations.Get(ctx, conv.ID); return err }},
		{"list conversation items", func() error {
			_, err := st.client.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStoreUnavailable(t, tc.name, tc.call()) })
	}
	if n := st.engine.count() - asked; n != 0 {
		t.Errorf("the engine was asked %d times while the store was down", n)
	}

	st.redis.Restart()
	st.waitReady(t, http.StatusOK)
	got, err := st.client.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != r1.OutputText() {
		t.Fatalf("the response stored before the outage: %+v, %v", got, err)
	}
	r2, err := st.create(ctx, "What was the secret word?", r1.ID)
	if err != nil || r2.Status != responses.ResponseStatusCompleted {
		t.Fatalf("after the restart: %+v, %v", r2, err)
	}
	if !strings.Contains(st.engine.last(), "The secret word is pelican.") {
		t.Errorf("the turn after the restart lost its context:\n%s", st.engine.last())
	}
}

// TestSDKStoreDiesMidTurn (issue 32, item 3): the store going down while
// the engine answers is never answered as a response: a create is a 503,
// a stream ends with an error event that the SDK raises, and neither
// response can be read afterwards.
func TestSDKStoreDiesMidTurn(t *testing.T) {
	ctx := context.Background()
	st := newOutageStack(t)

	t.Run("not streamed", func(t *testing.T) {
		st.waitReady(t, http.StatusOK)
		arrived, open := st.gate.hold()
		done := make(chan error, 1)
		go func() { _, err := st.create(ctx, "hi", ""); done <- err }()
		<-arrived
		st.redis.Kill()
		open()
		wantStoreUnavailable(t, "create", <-done)
		st.redis.Restart()
	})

	t.Run("streamed", func(t *testing.T) {
		st.waitReady(t, http.StatusOK)
		arrived, open := st.gate.hold()
		// The stream's first event waits for the engine's answer to begin.
		streams := make(chan *ssestream.Stream[responses.ResponseStreamEventUnion], 1)
		go func() {
			streams <- st.client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: testModel, Input: text("hi")})
		}()
		<-arrived
		st.redis.Kill()
		open()
		s := <-streams
		defer s.Close()
		if !s.Next() {
			t.Fatalf("no first event: %v", s.Err())
		}
		id := s.Current().Response.ID
		var types []string
		for s.Next() {
			types = append(types, s.Current().Type)
		}
		var se *ssestream.StreamError
		if !errors.As(s.Err(), &se) || se.Event.Type != "error" || !strings.Contains(string(se.Event.Data), `"code":"store_unavailable"`) {
			t.Fatalf("the stream ended with %v after %v; want an error event store_unavailable", s.Err(), types)
		}
		for _, typ := range types {
			if typ == "response.completed" {
				t.Errorf("a response that was not stored was announced completed: %v", types)
			}
		}
		st.redis.Restart()
		st.waitReady(t, http.StatusOK)
		_, err := st.client.Responses.Get(ctx, id, responses.ResponseGetParams{})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Errorf("the response whose stream failed: %v, want 404", err)
		}
	})
}
