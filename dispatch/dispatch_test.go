package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/turns"
)

const testModel = "m"

// engine is a stand-in for a model server: the dispatcher is the code
// under test, the engine only answers as one would.
type engine struct {
	*httptest.Server
	hits   atomic.Int64
	header atomic.Pointer[http.Header]
}

func newEngine(t testing.TB, h http.HandlerFunc) *engine {
	t.Helper()
	e := &engine{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		hdr := r.Header.Clone()
		e.header.Store(&hdr)
		h(w, r)
	}))
	t.Cleanup(e.Close)
	return e
}

const usageChunk = `data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":32},"completion_tokens_details":{"reasoning_tokens":1}}}`

// streamOK streams two chunks, a usage chunk and [DONE].
func streamOK(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	for _, tok := range []string{"hello", " there"} {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, usageChunk+"\n\ndata: [DONE]\n\n")
}

type fixture struct {
	d     *Dispatcher
	reg   *pools.Registry
	flow  *turns.Controller
	sess  *sessions.Store
	probe *probePolicy
	reg2  *prometheus.Registry
}

// probePolicy is round-robin that remembers every outcome it hears.
type probePolicy struct {
	affinity.RoundRobin
	outcomes chan affinity.Outcome
	hashes   atomic.Int64
}

func (p *probePolicy) NeedsHashes() bool { return true }

func (p *probePolicy) Pick(ctx context.Context, r *affinity.Request, c []*pools.Endpoint) (*pools.Endpoint, error) {
	p.hashes.Store(int64(len(r.Hashes)))
	return p.RoundRobin.Pick(ctx, r, c)
}

func (p *probePolicy) Done(r *affinity.Request, ep *pools.Endpoint, o affinity.Outcome) {
	p.outcomes <- o
}

func newFixture(t testing.TB, engines ...*engine) *fixture {
	t.Helper()
	return newFixtureWith(t, pools.Options{}, engines...)
}

func newFixtureWith(t testing.TB, opts pools.Options, engines ...*engine) *fixture {
	t.Helper()
	var eps []pools.EndpointConfig
	for _, e := range engines {
		eps = append(eps, pools.EndpointConfig{URL: e.URL})
	}
	log := slog.New(slog.DiscardHandler)
	opts.BreakerFailures, opts.BreakerOpenFor = 3, time.Minute
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{testModel}, Endpoints: eps}}, opts, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour)}) // fresh for the test's span
	}
	metrics := prometheus.NewRegistry()
	flow, err := turns.New(turns.Config{Tenants: []turns.Tenant{{Name: "acme", MaxBand: turns.Standard, Quota: turns.Quota{Concurrent: 1}}}}, turns.WithRegisterer(metrics))
	if err != nil {
		t.Fatal(err)
	}
	flow.Start(context.Background())
	t.Cleanup(func() { flow.Close(context.Background()) })
	sess, err := sessions.NewStore(sessions.Options{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	probe := &probePolicy{outcomes: make(chan affinity.Outcome, 16)}
	d, err := New(Options{Registry: reg, Policy: probe, Sessions: sess, Flow: flow, Logger: log, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{d: d, reg: reg, flow: flow, sess: sess, probe: probe, reg2: metrics}
}

func chatSpec(stream bool) *Spec {
	p := &prompt.Prompt{Model: testModel, Messages: []prompt.Message{{Role: "user", Content: strings.Repeat("fix the build please ", 20)}}}
	return &Spec{
		Tenant: "acme", Model: testModel, Path: "/v1/chat/completions",
		Body:         []byte(fmt.Sprintf(`{"model":"m","stream":%t,"messages":[{"role":"user","content":"hi"}]}`, stream)),
		ClientHeader: http.Header{"X-Session-Id": {"s1"}, "X-Turnpike-Priority": {"interactive"}, "Authorization": {"Bearer secret"}, "X-Request-Id": {"req-1"}},
		Prompt:       p,
	}
}

// TestStreamReadOnce: the turn's one reader yields every line as sent,
// notes the first data and the usage, and End gives routing, flow control
// and the session what the engine counted.
func TestStreamReadOnce(t *testing.T) {
	e := newEngine(t, streamOK)
	f := newFixture(t, e)
	tr, err := f.d.Begin(t.Context(), chatSpec(true))
	if err != nil {
		t.Fatal(err)
	}
	if f.probe.hashes.Load() == 0 {
		t.Error("a policy that scores by prefix was given no block hashes")
	}
	if tr.PromptTokens() != prompt.Count(nil, chatSpec(true).Prompt) {
		t.Errorf("prompt tokens %d, want the tokenizer's count %d", tr.PromptTokens(), prompt.Count(nil, chatSpec(true).Prompt))
	}
	// Sent, the turn holds its block hashes for routing's outcome, not
	// its token ids while it streams.
	if tr.tokens != nil || tr.bufs == nil || tr.bufs.tokens != nil || len(tr.route.Hashes) == 0 {
		t.Errorf("a sent turn holds %d token ids (buffer %d), %d hashes; want none, none and its hashes", len(tr.tokens), len(tr.bufs.tokens), len(tr.route.Hashes))
	}
	// acme may run one turn at a time: this one holds its ticket.
	var se *ShedError
	if _, err := f.d.Begin(t.Context(), chatSpec(true)); !errors.As(err, &se) || se.Reason != turns.ReasonQuotaConcurrency {
		t.Fatalf("a second turn during the stream: %v, want a concurrency shed", err)
	}
	var raw bytes.Buffer
	var sawDone, sawUsage bool
	for {
		l, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		raw.Write(l.Raw)
		sawDone = sawDone || l.Done
		sawUsage = sawUsage || l.Usage
	}
	if !sawDone || !sawUsage {
		t.Errorf("done %v, usage %v", sawDone, sawUsage)
	}
	if !strings.Contains(raw.String(), `"hello"`) || !strings.HasSuffix(raw.String(), "data: [DONE]\n\n") {
		t.Errorf("lines not as sent: %q", raw.String())
	}
	u, ok := tr.Usage()
	if !ok || u.PromptTokens != 40 || u.PromptTokensDetails.CachedTokens != 32 || u.CompletionTokensDetails.ReasoningTokens != 1 {
		t.Errorf("usage %+v, %v", u, ok)
	}
	if tr.TTFT() <= 0 {
		t.Error("no time to first token")
	}
	tr.End(nil)
	o := <-f.probe.outcomes
	if o.Err != nil || o.CachedTokens != 32 || o.PromptTokens != 40 || o.TTFT <= 0 {
		t.Errorf("routing heard %+v", o)
	}
	second, err := f.d.Begin(t.Context(), chatSpec(false))
	if err != nil {
		t.Fatalf("after End the ticket is back, yet: %v", err)
	}
	second.ReadAll()
	second.End(nil)
	<-f.probe.outcomes
	if st, ok := f.sess.Get("acme", "s1", time.Now()); !ok || st.Turns != 2 {
		t.Errorf("session %+v, %v: want the two admitted turns counted, not the shed one", st, ok)
	}
	hdr := *e.header.Load()
	if hdr.Get("X-Session-Id") != "s1" || hdr.Get("X-Request-Id") != "req-1" || hdr.Get("X-Turnpike-Priority") != "interactive" {
		t.Errorf("routing hints not passed on: %v", hdr)
	}
	if hdr.Get("Authorization") != "" {
		t.Error("the client's credentials were passed to the engine")
	}
	defer func() {
		if recover() == nil {
			t.Error("a second End did not panic")
		}
	}()
	tr.End(nil)
}

// TestRetryBeforeFirstByte: a 5xx is retried on another endpoint; the
// failing endpoint's outcome is an error.
func TestRetryBeforeFirstByte(t *testing.T) {
	bad := newEngine(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	good := newEngine(t, streamOK)
	f := newFixture(t, bad, good)
	for range 2 {
		tr, err := f.d.Begin(t.Context(), chatSpec(false))
		if err != nil {
			t.Fatal(err)
		}
		if tr.Endpoint().URL.String() != good.URL {
			t.Fatalf("answered by %s", tr.Endpoint().URL)
		}
		tr.ReadAll()
		tr.End(nil)
	}
	if bad.hits.Load() == 0 {
		t.Fatal("the failing endpoint was never tried")
	}
	if got := testutil.ToFloat64(f.d.retries); got != float64(bad.hits.Load()) {
		t.Errorf("retries %v, want %d", got, bad.hits.Load())
	}
}

// TestEngineRefusal: an engine's 4xx ends the turn in Begin with the
// engine's own message, gives everything back and never counts the
// prompt as cached there.
func TestEngineRefusal(t *testing.T) {
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","param":null,"code":400}}`)
	})
	f := newFixture(t, e)
	_, err := f.d.Begin(t.Context(), chatSpec(false))
	var ee *EngineError
	if !errors.As(err, &ee) || ee.Status != 400 || !ee.ContextLength() || !strings.Contains(ee.Message, "8192") || ee.Code != "" {
		t.Fatalf("err %v (%+v)", err, ee)
	}
	if o := <-f.probe.outcomes; o.Err == nil {
		t.Error("routing heard a refusal as a success")
	}
	// acme may run one turn at a time: a leaked ticket would shed this.
	if _, err := f.d.Begin(t.Context(), chatSpec(false)); !errors.As(err, &ee) {
		t.Fatalf("the next turn: %v, want the engine's refusal again", err)
	}
}

// TestStreamCut: a stream that breaks mid-line and may not move yields
// the whole lines before the break, then an error of class ErrStreamCut;
// the cut line is never returned.
func TestStreamCut(t *testing.T) {
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[]}\n\ndata: {\"cho")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	f := newFixtureWith(t, pools.Options{MaxMigrations: -1}, e)
	tr, err := f.d.Begin(t.Context(), chatSpec(true))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for {
		l, err := tr.Next()
		if err != nil {
			if !errors.Is(err, ErrStreamCut) || !errors.Is(err, pools.ErrUpstream) {
				t.Fatalf("err %v, want a cut stream", err)
			}
			tr.End(err)
			break
		}
		lines = append(lines, string(l.Raw))
	}
	if strings.Join(lines, "") != "data: {\"choices\":[]}\n\n" {
		t.Fatalf("lines %q", lines)
	}
	if o := <-f.probe.outcomes; o.Err == nil {
		t.Error("routing heard a cut stream as a success")
	}
}

// TestLongLine: a line longer than the reader's buffer comes back whole.
func TestLongLine(t *testing.T) {
	long := `data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", 200<<10) + `"}}]}` + "\n"
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, long+"\ndata: [DONE]\n\n")
	})
	f := newFixture(t, e)
	tr, err := f.d.Begin(t.Context(), chatSpec(true))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.End(nil)
	l, err := tr.Next()
	if err != nil || string(l.Raw) != long || len(l.Data) != len(long)-len("data: ")-1 {
		t.Fatalf("got %d bytes (%v), want %d", len(l.Raw), err, len(long))
	}
}

// TestShedCrossesAsShedError: a refusal by flow control reaches the
// caller as a *ShedError with when to retry, and nothing is sent.
func TestShedCrossesAsShedError(t *testing.T) {
	e := newEngine(t, streamOK)
	f := newFixture(t, e)
	f.flow.Close(context.Background()) // a closing controller sheds every turn
	_, err := f.d.Begin(t.Context(), chatSpec(false))
	var se *ShedError
	if !errors.As(err, &se) || se.Reason != turns.ReasonShuttingDown || se.RetryAfter <= 0 {
		t.Fatalf("err %v", err)
	}
	if e.hits.Load() != 0 {
		t.Error("a shed turn reached the engine")
	}
}

// TestClassifiesRawHints: Begin classifies the priority header against
// the tenant's bands; acme's maximum band caps it, an uncapped tenant
// gets it.
func TestClassifiesRawHints(t *testing.T) {
	f := newFixture(t, newEngine(t, streamOK))
	for _, tc := range []struct {
		tenant      string
		interactive bool
	}{{"acme", false}, {"other", true}} {
		spec := chatSpec(false)
		spec.Tenant = tc.tenant
		tr, err := f.d.Begin(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if tr.route.Interactive != tc.interactive {
			t.Errorf("%s asking for interactive: interactive %v, want %v", tc.tenant, tr.route.Interactive, tc.interactive)
		}
		tr.ReadAll()
		tr.End(nil)
		<-f.probe.outcomes
	}
}

// TestUnknownModel: a model no pool serves is ErrModelNotFound, before
// any admission.
func TestUnknownModel(t *testing.T) {
	f := newFixture(t, newEngine(t, streamOK))
	spec := chatSpec(false)
	spec.Model = "nope"
	if _, err := f.d.Begin(t.Context(), spec); !errors.Is(err, ErrModelNotFound) {
		t.Fatalf("err %v", err)
	}
}

// FuzzNext feeds arbitrary engine streams through the turn's reader: it
// never panics, and the lines it returns are the stream up to its last
// newline, byte for byte.
func FuzzNext(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte(usageChunk + "\n\n"))
	f.Add([]byte("event: x\ndata: {\"usage\":{\"prompt_tokens\":\"x\"}}\r\n\r\npartial"))
	f.Add([]byte("data:{\"usage\":null}\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		tr := &Turn{ctx: context.Background(), d: &Dispatcher{}, spec: &Spec{}, ep: &pools.Endpoint{ID: "e"},
			resp: &http.Response{Body: io.NopCloser(bytes.NewReader(stream))}}
		var got []byte
		for {
			l, err := tr.Next()
			if err != nil {
				break
			}
			got = append(got, l.Raw...)
		}
		want := stream[:bytes.LastIndexByte(stream, '\n')+1]
		if !bytes.Equal(got, want) {
			t.Fatalf("lines %q, want %q", got, want)
		}
	})
}

// FuzzEngineError reads arbitrary error bodies: never a panic, always a
// message.
func FuzzEngineError(f *testing.F) {
	f.Add(400, []byte(`{"error":{"message":"bad","code":"x","param":"messages"}}`))
	f.Add(422, []byte(`{"detail":"unprocessable"}`))
	f.Add(404, []byte(``))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := readEngineError(&http.Response{StatusCode: status, Body: io.NopCloser(bytes.NewReader(body))})
		if e.Message == "" && http.StatusText(status) != "" {
			t.Fatalf("no message for %d %q", status, body)
		}
		e.ContextLength()
	})
}

// simPair starts two identical simulated engines; the first request either
// of them serves is cut after dropAfter streamed chunks (none if negative).
func simPair(t *testing.T, dropAfter int) (*engine, *engine) {
	t.Helper()
	var first atomic.Bool
	start := func() *engine {
		eng, err := sim.New(sim.Config{ServedModelName: testModel, TimeScale: 0})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		h := eng.Handler()
		return newEngine(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == chatPath && dropAfter >= 0 && first.CompareAndSwap(false, true) {
				r.Header.Set(sim.FaultHeader, fmt.Sprintf("drop-after=%d", dropAfter))
			}
			h.ServeHTTP(w, r)
		})
	}
	return start(), start()
}

// streamText reads a turn's stream to its end and returns the answer's
// text, the chunks' ids and the number of data lines.
func streamText(t *testing.T, tr *Turn) (string, error) {
	t.Helper()
	var b strings.Builder
	for {
		l, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			return b.String(), err
		}
		if l.Data == nil || l.Done || l.Usage {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(l.Data, &c); err != nil {
			t.Fatalf("line %q: %v", l.Raw, err)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
}

// TestMigration: a stream whose engine dies after some tokens completes
// on the other engine; the text has no gap or repeat at the seam, and the
// usage counts both legs.
func TestMigration(t *testing.T) {
	const maxTokens = 40
	body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"ignore_eos":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"tell me about caches"}]}`, maxTokens)
	spec := func() *Spec {
		return &Spec{Tenant: "acme", Model: testModel, Path: chatPath, Body: []byte(body),
			Prompt: &prompt.Prompt{Model: testModel, Messages: []prompt.Message{{Role: "user", Content: "tell me about caches"}}}}
	}

	// The answer without a failure, from an engine of the same kind.
	a, b := simPair(t, -1)
	f := newFixture(t, a, b)
	tr, err := f.d.Begin(t.Context(), spec())
	if err != nil {
		t.Fatal(err)
	}
	want, err := streamText(t, tr)
	tr.End(err)
	<-f.probe.outcomes
	if err != nil || len(want) != maxTokens*sim.TokenBytes {
		t.Fatalf("baseline: %q, %v", want, err)
	}

	for _, dropAfter := range []int{1, 7} {
		t.Run(fmt.Sprintf("drop after %d chunks", dropAfter), func(t *testing.T) {
			a, b := simPair(t, dropAfter)
			f := newFixture(t, a, b)
			tr, err := f.d.Begin(t.Context(), spec())
			if err != nil {
				t.Fatal(err)
			}
			got, err := streamText(t, tr)
			if err != nil {
				t.Fatalf("the stream was not carried on: %v (text so far %q)", err, got)
			}
			if got != want {
				t.Errorf("text across the seam:\n got %q\nwant %q", got, want)
			}
			u, ok := tr.Usage()
			if !ok || u.CompletionTokens != maxTokens || u.PromptTokens != tr.PromptTokens() || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Errorf("usage %+v, want %d completion tokens over both legs", u, maxTokens)
			}
			tr.End(nil)
			if o := <-f.probe.outcomes; o.Err == nil {
				t.Error("the engine that died was not told to routing as a failure")
			}
			if o := <-f.probe.outcomes; o.Err != nil || o.CompletionTokens != maxTokens {
				t.Errorf("the leg that finished: %+v", o)
			}
			if got := testutil.ToFloat64(f.d.migrations.WithLabelValues(migrationResumed)); got != 1 {
				t.Errorf("migrations resumed %v, want 1", got)
			}
			if a.hits.Load()+b.hits.Load() != 2 {
				t.Errorf("engine requests %d, want 2", a.hits.Load()+b.hits.Load())
			}
		})
	}
}

// TestMigrationNotResumable: a cut tool call is not handed on as text;
// the stream ends with the cut, cleanly.
func TestMigrationNotResumable(t *testing.T) {
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"ls","arguments":"{\"pa"}}]}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	f := newFixture(t, e, newEngine(t, streamOK))
	tr, err := f.d.Begin(t.Context(), chatSpec(true))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Endpoint().URL.String() != e.URL {
		tr.ReadAll()
		tr.End(nil)
		<-f.probe.outcomes
		if tr, err = f.d.Begin(t.Context(), chatSpec(true)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = streamText(t, tr)
	if !errors.Is(err, ErrStreamCut) {
		t.Fatalf("err %v, want the cut", err)
	}
	tr.End(err)
	if got := testutil.ToFloat64(f.d.migrations.WithLabelValues(migrationNotResumable)); got != 1 {
		t.Errorf("not resumable %v, want 1", got)
	}
}

// TestResendWholeAnswer: an engine that dies while sending a non-streamed
// answer has sent the client nothing; the turn is answered by another
// endpoint.
func TestResendWholeAnswer(t *testing.T) {
	dying := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, `{"id":"chatcmpl-1","choices":[`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	good := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"id":"chatcmpl-2","choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`)
	})
	f := newFixture(t, dying, good)
	for dying.hits.Load() == 0 {
		tr, err := f.d.Begin(t.Context(), chatSpec(false))
		if err != nil {
			t.Fatal(err)
		}
		b, err := tr.ReadAll()
		if err != nil || !strings.Contains(string(b), "chatcmpl-2") {
			t.Fatalf("answer %q, %v", b, err)
		}
		if u, ok := tr.Usage(); !ok || u.PromptTokens != 9 {
			t.Errorf("usage %+v, %v", u, ok)
		}
		tr.End(nil)
		for len(f.probe.outcomes) > 0 {
			<-f.probe.outcomes
		}
	}
}

// TestPriorityForPrioritizingEngines: an engine whose pool schedules by
// priority is sent the turn's band as the request's priority (lower
// first), spliced into the client's body; any other engine gets the body
// as the client sent it.
func TestPriorityForPrioritizingEngines(t *testing.T) {
	var got atomic.Pointer[[]byte]
	e := newEngine(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(&b)
		streamOK(w, r)
	})
	f := newFixture(t, e)
	run := func(tenant string) map[string]json.RawMessage {
		t.Helper()
		spec := chatSpec(false)
		spec.Tenant = tenant
		tr, err := f.d.Begin(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		tr.ReadAll()
		tr.End(nil)
		<-f.probe.outcomes
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(*got.Load(), &fields); err != nil {
			t.Fatalf("engine body %q: %v", *got.Load(), err)
		}
		if string(fields["messages"]) != `[{"role":"user","content":"hi"}]` {
			t.Fatalf("engine body %q lost the client's messages", *got.Load())
		}
		return fields
	}
	if p, ok := run("other")["priority"]; ok {
		t.Fatalf("a first-come engine was sent priority %s", p)
	}
	if string(*got.Load()) != string(chatSpec(false).Body) {
		t.Fatalf("a first-come engine got %q, want the client's bytes", *got.Load())
	}

	f.reg.Endpoints()[0].Pool.Config.PriorityScheduling = true
	// other asks for interactive and may have it; acme's maximum band is
	// standard.
	for tenant, want := range map[string]string{"other": "0", "acme": "1"} {
		if p := string(run(tenant)["priority"]); p != want {
			t.Errorf("%s: priority %q, want %s", tenant, p, want)
		}
	}
}
