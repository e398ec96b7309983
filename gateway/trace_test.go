package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	"github.com/turnpike-gateway/turnpike/pools"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/tracing"
	"github.com/turnpike-gateway/turnpike/turns"
)

// tracedStack is a gateway with the whole turn path (sessions, flow
// control, the Responses API) over one simulated engine, traced into an
// in-memory exporter; the engine notes the traceparent of every chat
// completion it is sent.
type tracedStack struct {
	client openai.Client
	front  string
	spans  *tracetest.InMemoryExporter

	mu           sync.Mutex
	traceparents []string
}

func newTracedStack(t *testing.T, traced bool) *tracedStack {
	t.Helper()
	return newTracedStackTB(t, traced)
}

func newTracedStackTB(t testing.TB, traced bool) *tracedStack {
	t.Helper()
	st := &tracedStack{spans: tracetest.NewInMemoryExporter()}
	var tracer *tracing.Tracer
	if traced {
		p := tracing.NewSyncer(st.spans, tracing.Config{})
		t.Cleanup(func() { p.Close(context.Background()) })
		tracer = p.Tracer()
	}
	log := slog.New(slog.DiscardHandler)
	eng, err := sim.New(sim.Config{ServedModelName: testModel, TimeScale: 0})
	if err != nil {
		t.Fatal(err)
	}
	h := eng.Handler()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			st.mu.Lock()
			st.traceparents = append(st.traceparents, r.Header.Get("Traceparent"))
			st.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { backend.Close(); eng.Close() })
	reg, err := pools.NewRegistry([]pools.PoolConfig{{
		Name: "p", Model: "llama-3.1-8b", ServedModels: []string{testModel}, Endpoints: []pools.EndpointConfig{{URL: backend.URL}},
	}}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour)}) // fresh for the test's span
	}
	metrics := prometheus.NewRegistry()
	sess, err := sessions.NewStore(sessions.Options{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	var fc turns.FlowControl
	fc.EnsureDefaults()
	flow, err := turns.New(turns.Config{FlowControl: fc}, turns.WithRegisterer(metrics))
	if err != nil {
		t.Fatal(err)
	}
	flow.Start(context.Background())
	t.Cleanup(func() { flow.Close(context.Background()) })
	d, err := dispatch.New(dispatch.Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: log, Metrics: metrics,
		Sessions: sess, Flow: flow, Tracer: tracer})
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.OpenPebble(t.TempDir(), state.PebbleOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	svc := tpresponses.New(tpresponses.NewStore(db.Namespace("rs/"), tpresponses.StoreOptions{}), d,
		tpresponses.Config{CollectInterval: -1, Logger: log, Tracer: tracer})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, Dispatch: d, Logger: log, Metrics: metrics, Responses: svc, Tracer: tracer})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s.Handler())
	t.Cleanup(func() { front.Close(); svc.Close(context.Background()); db.Close() })
	st.front = front.URL
	st.client = openai.NewClient(option.WithBaseURL(front.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	return st
}

func (st *tracedStack) lastTraceparent(t *testing.T) string {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.traceparents) == 0 {
		t.Fatal("the engine was sent no chat completion")
	}
	return st.traceparents[len(st.traceparents)-1]
}

// turnSpans are the ended spans of one trace, by name, and its turn's span.
func turnSpans(t *testing.T, all tracetest.SpanStubs, turnName string, id trace.TraceID) (turn tracetest.SpanStub, byName map[string][]tracetest.SpanStub) {
	t.Helper()
	byName = map[string][]tracetest.SpanStub{}
	for _, s := range all {
		if s.SpanContext.TraceID() == id {
			byName[s.Name] = append(byName[s.Name], s)
		}
	}
	turns := byName[turnName]
	if len(turns) != 1 {
		t.Fatalf("trace %s has %d spans named %q; spans: %v", id, len(turns), turnName, names(byName))
	}
	return turns[0], byName
}

func names(m map[string][]tracetest.SpanStub) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	return out
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks the span's attributes named in want.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]any) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("span %q: no attribute %s (has %v)", s.Name, k, s.Attributes)
			continue
		}
		if g.AsInterface() != v {
			t.Errorf("span %q: %s = %v, want %v", s.Name, k, g.AsInterface(), v)
		}
	}
}

// wantChildren checks that each named span exists once or more and is a
// child of parent.
func wantChildren(t *testing.T, byName map[string][]tracetest.SpanStub, parent trace.SpanID, names ...string) {
	t.Helper()
	for _, n := range names {
		spans := byName[n]
		if len(spans) == 0 {
			t.Errorf("no span %q", n)
		}
		for _, s := range spans {
			if s.Parent.SpanID() != parent {
				t.Errorf("span %q has parent %s, want the turn's %s", n, s.Parent.SpanID(), parent)
			}
		}
	}
}

// engineSawTrace checks the engine's traceparent: the turn's trace, with
// the engine request's span as parent.
func engineSawTrace(t *testing.T, traceparent string, engine tracetest.SpanStub) {
	t.Helper()
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 {
		t.Fatalf("engine saw traceparent %q", traceparent)
	}
	if parts[1] != engine.SpanContext.TraceID().String() || parts[2] != engine.SpanContext.SpanID().String() {
		t.Errorf("engine saw traceparent %q; want trace %s, parent %s", traceparent, engine.SpanContext.TraceID(), engine.SpanContext.SpanID())
	}
}

func TestTraceChatTurn(t *testing.T) {
	st := newTracedStack(t, true)
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	comp, err := st.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello, traced world")},
	}, option.WithHeader("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01"), option.WithHeader("x-session-id", "agent-7"))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := trace.TraceIDFromHex(clientTrace)
	turn, byName := turnSpans(t, st.spans.GetSpans(), "chat "+testModel, id)
	if turn.Parent.SpanID().String() != clientSpan || !turn.Parent.IsRemote() {
		t.Errorf("turn's parent is %s (remote %v), want the client's %s", turn.Parent.SpanID(), turn.Parent.IsRemote(), clientSpan)
	}
	if turn.SpanKind != trace.SpanKindServer {
		t.Errorf("turn span kind %v, want server", turn.SpanKind)
	}
	wantAttrs(t, turn, map[attribute.Key]any{
		tracing.OperationName:  "chat",
		tracing.ProviderName:   "turnpike",
		tracing.RequestModel:   testModel,
		tracing.ConversationID: "agent-7",
		tracing.ResponseID:     comp.ID,
		tracing.InputTokens:    comp.Usage.PromptTokens,
		tracing.OutputTokens:   comp.Usage.CompletionTokens,
	})
	wantChildren(t, byName, turn.SpanContext.SpanID(), tracing.SpanAdmission, tracing.SpanPick, tracing.SpanEngine)
	engines := byName[tracing.SpanEngine]
	if len(engines) != 1 || engines[0].SpanKind != trace.SpanKindClient {
		t.Fatalf("engine spans %+v, want one client span", engines)
	}
	wantAttrs(t, engines[0], map[attribute.Key]any{"http.response.status_code": int64(200), tracing.ResponseID: comp.ID})
	engineSawTrace(t, st.lastTraceparent(t), engines[0])
}

func TestTraceResponsesTurn(t *testing.T) {
	st := newTracedStack(t, true)
	ctx := context.Background()
	r1, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text("first turn")})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := st.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, Input: text("second turn"), PreviousResponseID: openai.String(r1.ID),
	})
	if err != nil {
		t.Fatal(err)
	}
	tp := st.lastTraceparent(t)
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		t.Fatalf("engine saw traceparent %q", tp)
	}
	id, err := trace.TraceIDFromHex(parts[1])
	if err != nil {
		t.Fatalf("engine saw traceparent %q: %v", tp, err)
	}
	turn, byName := turnSpans(t, st.spans.GetSpans(), "responses "+testModel, id)
	if turn.Parent.IsValid() {
		t.Errorf("turn without a client traceparent has parent %s", turn.Parent.SpanID())
	}
	wantAttrs(t, turn, map[attribute.Key]any{
		tracing.OperationName: "responses",
		tracing.RequestModel:  testModel,
		// The chain's session is named after its first response.
		tracing.ConversationID: r1.ID,
		tracing.ResponseID:     r2.ID,
		tracing.InputTokens:    r2.Usage.InputTokens,
		tracing.OutputTokens:   r2.Usage.OutputTokens,
	})
	wantChildren(t, byName, turn.SpanContext.SpanID(),
		tracing.SpanStateLoad, tracing.SpanAdmission, tracing.SpanPick, tracing.SpanEngine, tracing.SpanStateSave)
	engineSawTrace(t, tp, byName[tracing.SpanEngine][0])
}

func TestTraceOff(t *testing.T) {
	st := newTracedStack(t, false)
	_, err := st.client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	}, option.WithHeader("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	if err != nil {
		t.Fatal(err)
	}
	if tp := st.lastTraceparent(t); tp != "" {
		t.Errorf("tracing off, the engine saw traceparent %q", tp)
	}
	if n := len(st.spans.GetSpans()); n != 0 {
		t.Errorf("tracing off, %d spans exported", n)
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)

// BenchmarkTracedChat is a chat turn through the whole turn path over a
// simulated engine, with tracing off and on (every span sampled, exported
// to memory and dropped), to show what a traced turn costs.
func BenchmarkTracedChat(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			st := newTracedStackTB(b, on)
			body := `{"model":"test-model","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
			b.ReportAllocs()
			for b.Loop() {
				resp, err := http.Post(st.front+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
				st.spans.Reset()
			}
		})
	}
}

// A background response outlives the request that created it: its turn is
// the root of a trace of its own, linked to the creating request's span,
// with the dispatch spans under it.
func TestTraceBackgroundResponse(t *testing.T) {
	st := newTracedStack(t, true)
	ctx := context.Background()
	const clientTrace, clientSpan = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
	r, err := st.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, Input: text("work on this alone"), Background: openai.Bool(true),
	}, option.WithHeader("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01"))
	if err != nil {
		t.Fatal(err)
	}
	for r.Status != responses.ResponseStatusCompleted {
		if r.Status == responses.ResponseStatusFailed || r.Status == responses.ResponseStatusCancelled {
			t.Fatalf("background response %s", r.Status)
		}
		time.Sleep(20 * time.Millisecond)
		if r, err = st.client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); err != nil {
			t.Fatal(err)
		}
	}
	// The job's span ends after the response is stored as completed.
	var job tracetest.SpanStub
	for tries := 0; job.Name == ""; tries++ {
		if tries == 3000 {
			t.Fatal("no span of the background job after 30s")
		}
		for _, s := range st.spans.GetSpans() {
			if v, ok := attrs(s)[tracing.Background]; ok && v.AsBool() {
				job = s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	created, _ := turnSpans(t, st.spans.GetSpans(), "responses "+testModel, mustTraceID(t, clientTrace))
	if job.SpanContext.TraceID() == created.SpanContext.TraceID() || job.Parent.IsValid() {
		t.Errorf("the job's span is in the creating request's trace, or has a parent (%s)", job.Parent.SpanID())
	}
	if len(job.Links) != 1 || job.Links[0].SpanContext.SpanID() != created.SpanContext.SpanID() {
		t.Errorf("the job's span links %+v, want the creating request's span %s", job.Links, created.SpanContext.SpanID())
	}
	if job.SpanKind != trace.SpanKindConsumer {
		t.Errorf("job span kind %v, want consumer", job.SpanKind)
	}
	wantAttrs(t, job, map[attribute.Key]any{tracing.ResponseID: r.ID, tracing.RequestModel: testModel})
	_, byName := turnSpans(t, st.spans.GetSpans(), "responses "+testModel, job.SpanContext.TraceID())
	wantChildren(t, byName, job.SpanContext.SpanID(), tracing.SpanAdmission, tracing.SpanPick, tracing.SpanEngine)
}

// Each turn on a WebSocket connection gets its own span, a child of the
// traceparent the client sent on the upgrade.
func TestTraceWebSocketTurns(t *testing.T) {
	st := newTracedStack(t, true)
	const clientTrace, clientSpan = "6bf92f3577b34da6a3ce929d0e0e4736", "20f067aa0ba902b7"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	hdr := http.Header{"Traceparent": {"00-" + clientTrace + "-" + clientSpan + "-01"}}
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(st.front, "http")+"/v1/responses", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	var ids []string
	for _, in := range []string{"Say one.", "Say two."} {
		gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"`+in+`","max_output_tokens":8}`)
		id, ev := gatewaytest.WSTurn(t, conn)
		if ev.Type != "response.completed" {
			t.Fatalf("turn ended with %s", ev.Type)
		}
		ids = append(ids, id)
	}
	// A turn's span ends just after its last event is sent.
	var turns []tracetest.SpanStub
	for tries := 0; len(turns) < 2; tries++ {
		if tries == 3000 {
			t.Fatalf("%d turn spans after 30s, want 2", len(turns))
		}
		time.Sleep(10 * time.Millisecond)
		turns = turns[:0]
		for _, s := range st.spans.GetSpans() {
			if s.Name == "responses "+testModel {
				turns = append(turns, s)
			}
		}
	}
	for i, turn := range turns {
		if turn.SpanContext.TraceID().String() != clientTrace || turn.Parent.SpanID().String() != clientSpan {
			t.Errorf("turn %d: trace %s parent %s, want the client's", i, turn.SpanContext.TraceID(), turn.Parent.SpanID())
		}
		wantAttrs(t, turn, map[attribute.Key]any{tracing.ResponseID: ids[i]})
	}
}

func mustTraceID(t *testing.T, hex string) trace.TraceID {
	t.Helper()
	id, err := trace.TraceIDFromHex(hex)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
