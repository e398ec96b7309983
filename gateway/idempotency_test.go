package gateway

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// newIdempotentStack is a responses stack over engine whose gateway keeps
// idempotent answers in recs.
func newIdempotentStack(t *testing.T, recs *state.Records, engine http.Handler) *responsesStack {
	t.Helper()
	st := &responsesStack{}
	g := gatewaytest.NewOn(t, tpresponses.Config{}, func(t testing.TB, p gatewaytest.Parts) http.Handler {
		s, err := New(Options{Registry: p.Registry, Dispatch: p.Dispatch, Logger: p.Logger, Responses: p.Service, Idempotency: recs})
		if err != nil {
			t.Fatal(err)
		}
		st.server = s
		return s.Handler()
	}, engine)
	st.front, st.engine, st.engines, st.client = g.Front, g.Engine, g.Engines, g.Client
	return st
}

func simEngine(t *testing.T) http.Handler {
	t.Helper()
	eng, err := sim.New(sim.Config{ServedModelName: gatewaytest.TestModel, TimeScale: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng.Handler()
}

func withKey(key string) option.RequestOption { return option.WithHeader("Idempotency-Key", key) }

func chatParams(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: gatewaytest.TestModel, MaxTokens: openai.Int(8),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
}

// TestIdempotencyKeyAnswersOnce (issue 35): a non-streamed Responses or
// chat request sent again with the same Idempotency-Key gets the first
// answer again, marked replayed, and the engine is asked once; another
// key runs again.
func TestIdempotencyKeyAnswersOnce(t *testing.T) {
	st := newIdempotentStack(t, state.NewMemory().Records("idem"), simEngine(t))
	ctx := t.Context()

	t.Run("responses", func(t *testing.T) {
		before := st.engine.Count()
		params := responses.ResponseNewParams{Model: gatewaytest.TestModel, Input: text("hello"), MaxOutputTokens: openai.Int(8)}
		first, err := st.client.Responses.New(ctx, params, withKey("resp-1"))
		if err != nil {
			t.Fatal(err)
		}
		var raw *http.Response
		again, err := st.client.Responses.New(ctx, params, withKey("resp-1"), option.WithResponseInto(&raw))
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != first.ID || again.OutputText() != first.OutputText() || raw.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the retry got %s (replayed %q), want %s again", again.ID, raw.Header.Get("Idempotent-Replayed"), first.ID)
		}
		if n := st.engine.Count() - before; n != 1 {
			t.Fatalf("the engine was asked %d times, want once", n)
		}
		// The first answer's chain goes on from the replayed id.
		next, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: gatewaytest.TestModel, Input: text("and then?"),
			MaxOutputTokens: openai.Int(8), PreviousResponseID: openai.String(again.ID)}, withKey("resp-2"))
		if err != nil || next.ID == first.ID {
			t.Fatalf("the next turn under a new key: %v, id %s", err, next.ID)
		}
	})

	t.Run("chat", func(t *testing.T) {
		before := st.engine.Count()
		first, err := st.client.Chat.Completions.New(ctx, chatParams("hi"), withKey("chat-1"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := st.client.Chat.Completions.New(ctx, chatParams("hi"), withKey("chat-1"))
		if err != nil {
			t.Fatal(err)
		}
		if again.ID != first.ID || again.Choices[0].Message.Content != first.Choices[0].Message.Content {
			t.Fatalf("the retry got %s, want %s again", again.ID, first.ID)
		}
		other, err := st.client.Chat.Completions.New(ctx, chatParams("hi"), withKey("chat-2"))
		if err != nil || other.ID == first.ID {
			t.Fatalf("another key: %v, id %s", err, other.ID)
		}
		if n := st.engine.Count() - before; n != 2 {
			t.Fatalf("the engine was asked %d times, want twice (two keys)", n)
		}
	})

	t.Run("streamed requests are not covered", func(t *testing.T) {
		before := st.engine.Count()
		for range 2 {
			s := st.client.Chat.Completions.NewStreaming(ctx, chatParams("stream"), withKey("stream-1"))
			for s.Next() {
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
		}
		if n := st.engine.Count() - before; n != 2 {
			t.Fatalf("the engine was asked %d times, want twice", n)
		}
	})
}

// TestIdempotencyKeyErrors: a key sent again with another body, or with
// another route, is a 400 idempotency_key_reused that says not to retry;
// a key too long is a 400 invalid_idempotency_key.
func TestIdempotencyKeyErrors(t *testing.T) {
	st := newIdempotentStack(t, state.NewMemory().Records("idem"), simEngine(t))
	ctx := t.Context()
	if _, err := st.client.Chat.Completions.New(ctx, chatParams("one"), withKey("k")); err != nil {
		t.Fatal(err)
	}
	want := func(err error, status int, code string) {
		t.Helper()
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != status || apiErr.Code != code {
			t.Fatalf("got %v, want %d %s", err, status, code)
		}
	}
	_, err := st.client.Chat.Completions.New(ctx, chatParams("two"), withKey("k"))
	want(err, http.StatusBadRequest, "idempotency_key_reused")
	_, err = st.client.Responses.New(ctx, responses.ResponseNewParams{Model: gatewaytest.TestModel, Input: text("one")}, withKey("k"))
	want(err, http.StatusBadRequest, "idempotency_key_reused")
	_, err = st.client.Chat.Completions.New(ctx, chatParams("one"), withKey(strings.Repeat("k", 256)))
	want(err, http.StatusBadRequest, "invalid_idempotency_key")
}

// gatedEngine holds each chat completion until the test opens its gate,
// counting those that arrived; failFirst answers the first with a 500.
type gatedEngine struct {
	h         http.Handler
	gate      chan struct{}
	arrived   atomic.Int64
	failFirst bool
}

func (g *gatedEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/chat/completions" {
		if n := g.arrived.Add(1); g.failFirst && n == 1 {
			http.Error(w, `{"error":{"message":"boom","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		<-g.gate
	}
	g.h.ServeHTTP(w, r)
}

// TestIdempotencyKeyWaitsForTheFirst: a retry sent while the first
// request of its key runs waits for it and gets its answer; the engine is
// asked once.
func TestIdempotencyKeyWaitsForTheFirst(t *testing.T) {
	eng := &gatedEngine{h: simEngine(t), gate: make(chan struct{})}
	st := newIdempotentStack(t, state.NewMemory().Records("idem"), eng)
	ctx := t.Context()
	var wg sync.WaitGroup
	ids := make([]string, 2)
	errs := make([]error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, err := st.client.Chat.Completions.New(ctx, chatParams("slow"), withKey("w"))
		if err == nil {
			ids[0] = r.ID
		}
		errs[0] = err
	}()
	eventually(t, "the first request to reach the engine", func() bool { return eng.arrived.Load() == 1 })
	wg.Add(1)
	go func() {
		defer wg.Done()
		r, err := st.client.Chat.Completions.New(ctx, chatParams("slow"), withKey("w"))
		if err == nil {
			ids[1] = r.ID
		}
		errs[1] = err
	}()
	waitOutcome(t, st.server, idemWaited, 1)
	close(eng.gate)
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || ids[0] != ids[1] {
		t.Fatalf("first %s %v, retry %s %v: want one answer twice", ids[0], errs[0], ids[1], errs[1])
	}
	if n := eng.arrived.Load(); n != 1 {
		t.Fatalf("the engine was asked %d times, want once", n)
	}
}

// waitOutcome waits until s counted n idempotent requests of outcome.
func waitOutcome(t *testing.T, s *Server, outcome string, n float64) {
	t.Helper()
	eventually(t, "the outcome "+outcome, func() bool { return testutil.ToFloat64(s.idem.outcomes.WithLabelValues(outcome)) == n })
}

// eventually waits for cond, failing t after a minute: a condition, not a
// time budget, on a machine that may be loaded.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIdempotencyKeyFailureNotKept: an answer that is not a 2xx is not
// kept: the retry runs again, and its success is what the key keeps.
func TestIdempotencyKeyFailureNotKept(t *testing.T) {
	eng := &gatedEngine{h: simEngine(t), gate: make(chan struct{}), failFirst: true}
	close(eng.gate)
	st := newIdempotentStack(t, state.NewMemory().Records("idem"), eng)
	ctx := t.Context()
	if _, err := st.client.Chat.Completions.New(ctx, chatParams("x"), withKey("f")); err == nil {
		t.Fatal("the engine's failure was answered 200")
	}
	first, err := st.client.Chat.Completions.New(ctx, chatParams("x"), withKey("f"))
	if err != nil {
		t.Fatalf("the retry after a failure: %v", err)
	}
	again, err := st.client.Chat.Completions.New(ctx, chatParams("x"), withKey("f"))
	if err != nil || again.ID != first.ID || eng.arrived.Load() != 2 {
		t.Fatalf("the third try: %v, %s vs %s, engine asked %d times (want 2)", err, again.ID, first.ID, eng.arrived.Load())
	}
}

// TestIdempotencyKeyAcrossGateways: two gateways keeping their answers in
// one Redis; a retry that lands on the other gateway gets the first's
// answer, and the engine is asked once.
func TestIdempotencyKeyAcrossGateways(t *testing.T) {
	srv := redistest.Start(t)
	open := func() *state.Records {
		db, err := state.OpenRedis(t.Context(), srv.URL(), state.RedisOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db.Records("idempotency")
	}
	eng := &gatedEngine{h: simEngine(t), gate: make(chan struct{})}
	close(eng.gate)
	a, b := newIdempotentStack(t, open(), eng), newIdempotentStack(t, open(), eng)
	first, err := a.client.Chat.Completions.New(t.Context(), chatParams("shared"), withKey("across"))
	if err != nil {
		t.Fatal(err)
	}
	var raw *http.Response
	again, err := b.client.Chat.Completions.New(t.Context(), chatParams("shared"), withKey("across"), option.WithResponseInto(&raw))
	if err != nil || again.ID != first.ID || raw.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry on the other gateway: %v, %s vs %s", err, again.ID, first.ID)
	}
	if n := eng.arrived.Load(); n != 1 {
		t.Fatalf("the engine was asked %d times, want once", n)
	}
}

// FuzzIdempotencyRequest: what the gateway reads of a request with a key,
// the key and the body's stream member, never panics, and a key it takes
// is short printable ASCII.
func FuzzIdempotencyRequest(f *testing.F) {
	f.Add("key-1", []byte(`{"model":"m","stream":true}`))
	f.Add("", []byte(`{"stream":false`))
	f.Add("k\x00", []byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, key string, body []byte) {
		if checkIdempotencyKey(key) == nil {
			if len(key) == 0 || len(key) > maxIdempotencyKey || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
				t.Fatalf("key %q taken", key)
			}
		}
		streamed(body)
		idempotencyDigest(idempotentChatRoute, body)
	})
}

// FuzzIdempotencyRecord: a record read from the store decodes or is
// refused, never panics; one that decodes encodes to the same bytes.
func FuzzIdempotencyRecord(f *testing.F) {
	done := idempotencyRecord{kind: recordDone, status: 200, contentType: "application/json", body: []byte(`{"id":"x"}`)}
	f.Add(done.encode())
	running := idempotencyRecord{kind: recordRunning}
	f.Add(running.encode())
	f.Add([]byte{1, 'd'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeIdempotencyRecord(b)
		if err != nil {
			return
		}
		if got := r.encode(); !bytes.Equal(got, b) {
			t.Fatalf("decoded %x, encoded again %x", b, got)
		}
	})
}

// TestIdempotencyKeyClaimOfADeadGateway: a key claimed by a gateway that
// died mid-request (its claim no longer renewed) is taken over by the
// retry once the claim runs out (the retry waits while it lives): the
// retry runs, once, and its answer is what the key keeps.
func TestIdempotencyKeyClaimOfADeadGateway(t *testing.T) {
	recs := state.NewMemory().Records("idem")
	eng := &gatedEngine{h: simEngine(t), gate: make(chan struct{})}
	close(eng.gate)
	st := newIdempotentStack(t, recs, eng)
	body := `{"model":"` + gatewaytest.TestModel + `","max_tokens":8,"messages":[{"role":"user","content":"orphan"}]}`
	// The dead gateway's claim, as it left it, with a short life.
	claim := idempotencyRecord{kind: recordRunning, digest: idempotencyDigest(idempotentChatRoute, []byte(body))}
	if ok, err := recs.Create(t.Context(), idempotencyStoreKey(DefaultTenant, "dead"), claim.encode(), 300*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	send := func() (int, string, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, st.front.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "dead")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String(), resp.Header.Get("Idempotent-Replayed")
	}
	code, first, _ := send()
	if code != http.StatusOK {
		t.Fatalf("the retry after the claim ran out: %d %s", code, first)
	}
	if n := eng.arrived.Load(); n != 1 {
		t.Fatalf("the engine was asked %d times, want once", n)
	}
	if code, again, replayed := send(); code != http.StatusOK || again != first || replayed != "true" {
		t.Fatalf("the next retry: %d replayed %q, %s; want the kept answer %s", code, replayed, again, first)
	}
}
