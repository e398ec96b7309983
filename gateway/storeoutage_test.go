package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
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
// behind a gate (at timeScale, sim.Config's), with an OpenAI SDK client
// that does not retry.
type outageStack struct {
	redis  *redistest.Server
	front  *httptest.Server
	client openai.Client
	engine *recorder
	gate   *gate
}

func newOutageStack(t *testing.T, timeScale float64) *outageStack {
	t.Helper()
	srv := redistest.Start(t)
	log := slog.New(slog.DiscardHandler)
	// A quick probe: the test sees Redis back within a tenth of a second.
	db, err := state.OpenRedis(context.Background(), srv.URL(), state.RedisOptions{HealthInterval: 100 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := sim.New(sim.Config{ServedModelName: testModel, TimeScale: timeScale})
	if err != nil {
		t.Fatal(err)
	}
	st := &outageStack{redis: srv, gate: &gate{h: eng.Handler()}}
	st.engine = &recorder{H: st.gate}
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
		svc.Close(context.Background())
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
	st := newOutageStack(t, 0)
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
	asked := st.engine.Count()
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
	if n := st.engine.Count() - asked; n != 0 {
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
	if !strings.Contains(st.engine.Last(), "The secret word is pelican.") {
		t.Errorf("the turn after the restart lost its context:\n%s", st.engine.Last())
	}
}

// TestSDKStoreDiesMidTurn (issue 32, item 3): the store going down while
// the engine answers is never answered as a response: a create is a 503,
// a stream ends with an error event that the SDK raises, and neither
// response can be read afterwards.
func TestSDKStoreDiesMidTurn(t *testing.T) {
	ctx := context.Background()
	st := newOutageStack(t, 0)

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

// TestSDKStoreOutageUnderLoad (issue 32, item 3): Redis stopped and
// restarted under 20 clients writing responses as fast as they are
// answered, 15 without a stream and 5 streamed, on an engine in real
// time so that turns are under way when Redis goes. Every answer is a
// response that ended (completed, or incomplete at max_output_tokens)
// and reads back as it was answered, or a 5xx (for a stream: a 503
// before it, or an error event that ends it); never a response that was
// not stored.
func TestSDKStoreOutageUnderLoad(t *testing.T) {
	const writers, streamed = 20, 5
	ctx := context.Background()
	st := newOutageStack(t, 1)
	st.waitReady(t, http.StatusOK)

	var mu sync.Mutex
	answered := map[string]responses.ResponseStatus{} // by id
	counts := map[string]int{}
	count := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		counts[what]++
	}
	// answer sorts one answer: a response (kept to read back), a 5xx,
	// or wrong.
	answer := func(resp *responses.Response, err error, kind string) {
		var apiErr *openai.Error
		var se *ssestream.StreamError
		switch {
		case err == nil && (resp.Status == responses.ResponseStatusCompleted || resp.Status == responses.ResponseStatusIncomplete):
			count(kind + " 200 " + string(resp.Status))
			mu.Lock()
			answered[resp.ID] = resp.Status
			mu.Unlock()
		case errors.As(err, &apiErr) && apiErr.StatusCode >= 500:
			count(fmt.Sprintf("%s %d %s", kind, apiErr.StatusCode, apiErr.Code))
		case errors.As(err, &se) && strings.Contains(string(se.Event.Data), `"code":"store_unavailable"`):
			count(kind + " error event store_unavailable")
		default:
			count(kind + " WRONG")
			if resp != nil {
				t.Errorf("%s: an answer that is neither a stored response nor a 5xx: %s %s, %v", kind, resp.ID, resp.Status, err)
			} else {
				t.Errorf("%s: an answer that is neither a stored response nor a 5xx: %v", kind, err)
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// turns counts each writer's answers.
	var turns [writers]atomic.Int64
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if w < streamed {
					resp, err := streamOnce(ctx, st, fmt.Sprintf("writer %d, turn %d", w, i))
					answer(resp, err, "streamed")
				} else {
					resp, err := st.create(ctx, fmt.Sprintf("writer %d, turn %d", w, i), "")
					answer(resp, err, "plain")
				}
				turns[w].Add(1)
			}
		})
	}
	// Let every writer be answered a few times, stop Redis until the
	// gateway has refused some, then start it again and let them write on.
	served := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(answered)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waited thirty seconds for %s; %v", what, counts)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("answers before the outage", func() bool { return served() >= 3*writers })
	st.redis.Kill()
	// Redis stays down until every writer has been answered twice since:
	// the turn it had under way when Redis went has ended in the outage.
	var atKill [writers]int64
	for w := range turns {
		atKill[w] = turns[w].Load()
	}
	st.waitReady(t, http.StatusServiceUnavailable)
	waitFor("every writer answered twice in the outage", func() bool {
		for w := range turns {
			if turns[w].Load() < atKill[w]+2 {
				return false
			}
		}
		return true
	})
	st.redis.Restart()
	st.waitReady(t, http.StatusOK)
	before := served()
	waitFor("answers after the restart", func() bool { return served() >= before+3*writers })
	close(stop)
	wg.Wait()

	readBack, unreadable := 0, 0
	for id, status := range answered {
		got, err := st.client.Responses.Get(ctx, id, responses.ResponseGetParams{})
		if err != nil || got.Status != status {
			unreadable++
			t.Errorf("response %s was answered %s, but reads back %v", id, status, err)
			continue
		}
		readBack++
	}
	t.Logf("answers: %v", counts)
	t.Logf("%d responses answered with 200: %d read back as answered, %d not", len(answered), readBack, unreadable)
}

// streamOnce creates a streamed response and returns how it ended: the
// response its last event ended (completed or incomplete), or the error
// that ended the stream.
func streamOnce(ctx context.Context, st *outageStack, input string) (*responses.Response, error) {
	s := st.client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: testModel, Input: text(input), MaxOutputTokens: openai.Int(16)})
	defer s.Close()
	var done *responses.Response
	for s.Next() {
		switch ev := s.Current(); ev.Type {
		case "response.completed", "response.incomplete":
			r := ev.Response
			done = &r
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if done == nil {
		return nil, errors.New("the stream ended without its response's end")
	}
	return done, nil
}
