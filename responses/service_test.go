package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

func TestChainContext(t *testing.T) {
	eng := &fakeEngine{}
	svc, st := newTestService(t, eng)
	ctx := context.Background()
	create := func(body string) *wire.Response {
		t.Helper()
		resp, err := svc.Create(ctx, "a", mustDecode(t, body), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != wire.StatusCompleted {
			t.Fatalf("status %s, error %+v", resp.Status, resp.Error)
		}
		return resp
	}
	r1 := create(`{"model":"m","input":"one","instructions":"be brief"}`)
	r2 := create(fmt.Sprintf(`{"model":"m","input":"two","previous_response_id":%q}`, r1.ID))
	r3 := create(fmt.Sprintf(`{"model":"m","input":"three","previous_response_id":%q}`, r2.ID))
	// A fork from r2: its context is r1, r2, then its own items.
	r4 := create(fmt.Sprintf(`{"model":"m","input":"fork","previous_response_id":%q}`, r2.ID))
	r5 := create(fmt.Sprintf(`{"model":"m","input":"after fork","previous_response_id":%q}`, r4.ID))

	reqs := eng.requests()
	render := func(r chatRequest) string {
		var parts []string
		for _, m := range r.Messages {
			parts = append(parts, m.Role+":"+*m.Content)
		}
		return strings.Join(parts, "|")
	}
	want := []string{
		"system:be brief|user:one",
		"user:one|assistant:echo: one|user:two",
		"user:one|assistant:echo: one|user:two|assistant:echo: two|user:three",
		"user:one|assistant:echo: one|user:two|assistant:echo: two|user:fork",
		"user:one|assistant:echo: one|user:two|assistant:echo: two|user:fork|assistant:echo: fork|user:after fork",
	}
	for i, w := range want {
		if got := render(reqs[i]); got != w {
			t.Errorf("turn %d: engine got\n  %s\nwant\n  %s", i+1, got, w)
		}
	}
	rec3, _ := st.GetResponse(ctx, "a", r3.ID)
	if len(rec3.Context) != 1 {
		t.Errorf("a linear chain should be one segment, got %+v", rec3.Context)
	}
	rec5, _ := st.GetResponse(ctx, "a", r5.ID)
	if len(rec5.Context) != 2 {
		t.Errorf("a fork should add one segment, got %+v", rec5.Context)
	}
}

func TestTenantIsolation(t *testing.T) {
	svc, st := newTestService(t, &fakeEngine{})
	ctx := context.Background()
	resp, err := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"secret"}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetResponse(ctx, "b", resp.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("store: tenant b read a's response: %v", err)
	}
	for name, fn := range map[string]func() error{
		"get":    func() error { _, err := svc.Get(ctx, "b", resp.ID); return err },
		"delete": func() error { _, err := svc.Delete(ctx, "b", resp.ID); return err },
		"items":  func() error { _, err := svc.InputItems(ctx, "b", resp.ID, ListOptions{}); return err },
		"previous": func() error {
			_, err := svc.Create(ctx, "b", mustDecode(t, fmt.Sprintf(`{"model":"m","input":"x","previous_response_id":%q}`, resp.ID)), nil, nil)
			return err
		},
		"item_reference": func() error {
			_, err := svc.Create(ctx, "b", mustDecode(t, fmt.Sprintf(`{"model":"m","input":[{"type":"item_reference","id":%q}]}`, resp.Output[0].ID)), nil, nil)
			return err
		},
	} {
		if err := fn(); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s by another tenant: got %v, want not found", name, err)
		}
	}
	if _, err := svc.Get(ctx, "a", resp.ID); err != nil {
		t.Errorf("owner cannot read: %v", err)
	}
}

func TestRestartKeepsResponses(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, dir)
	svc := New(st.StateStore, &fakeEngine{}, Config{CollectInterval: -1})
	svc.Start(t.Context())
	var ids []string
	for i := range 5 {
		resp, err := svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","input":"turn %d"}`, i)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.ID)
	}
	svc.Close(context.Background())
	st.Close()

	st = openStore(t, dir)
	defer st.Close()
	for _, id := range ids {
		rec, err := st.GetResponse(ctx, "a", id)
		if err != nil || rec.Response.Status != wire.StatusCompleted {
			t.Fatalf("%s after restart: %v", id, err)
		}
		if got := rec.Response.Output[0].Text(); !strings.HasPrefix(got, "echo: turn") {
			t.Errorf("%s output %q", id, got)
		}
	}
}

func TestBackgroundRecovery(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, dir)
	blocked := &fakeEngine{block: make(chan struct{})}
	svc := New(st.StateStore, blocked, Config{CollectInterval: -1})
	svc.Start(t.Context())
	resp, err := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"long job","background":true}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != wire.StatusQueued {
		t.Fatalf("status %s, want queued", resp.Status)
	}
	waitFor(t, func() bool { return len(blocked.requests()) == 1 })
	// Shut down mid-run: the job must stay pending, not end.
	svc.Close(context.Background())
	st.Close()

	svc, st = reopen(t, dir)
	defer st.Close()
	defer svc.Close(context.Background())
	waitFor(t, func() bool {
		r, _ := svc.Get(ctx, "a", resp.ID)
		return r.Status == wire.StatusCompleted
	})
	r, _ := svc.Get(ctx, "a", resp.ID)
	if r.Output[0].Text() != "echo: long job" {
		t.Errorf("re-run output %q", r.Output[0].Text())
	}
	evs, _ := st.Events(ctx, resp.ID, -1)
	if len(evs) == 0 || !strings.Contains(string(evs[len(evs)-1]), "response.completed") {
		t.Errorf("event log does not end with response.completed (%d events)", len(evs))
	}
}

func TestBackgroundGivesUpAfterMaxAttempts(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st := openStore(t, dir)
	rec := &Record{Tenant: "a", Response: &wire.Response{ID: "resp_x", Object: "response", Status: wire.StatusInProgress, Background: true, Store: true, Output: []wire.Item{}},
		Job: &Job{Request: []byte(`{"model":"m","input":"x","background":true}`), Attempts: 2}}
	if err := st.PutResponse(ctx, rec, true); err != nil {
		t.Fatal(err)
	}
	svc := New(st.StateStore, &fakeEngine{}, Config{CollectInterval: -1, MaxAttempts: 2})
	svc.Start(t.Context())
	defer func() { svc.Close(context.Background()); st.Close() }()
	r, err := svc.Get(ctx, "a", "resp_x")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != wire.StatusFailed || r.Error == nil || !strings.Contains(r.Error.Message, "restarted") {
		t.Errorf("got %s %+v, want failed with a clear error", r.Status, r.Error)
	}
	if jobs, _ := st.PendingJobs(ctx); len(jobs) != 0 {
		t.Errorf("%d jobs still pending", len(jobs))
	}
}

func TestCancelBackground(t *testing.T) {
	eng := &fakeEngine{block: make(chan struct{})}
	svc, _ := newTestService(t, eng)
	ctx := context.Background()
	resp, err := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"x","background":true}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(eng.requests()) == 1 })
	got, err := svc.Cancel(ctx, "a", resp.ID)
	if err != nil || got.Status != wire.StatusCancelled {
		t.Fatalf("cancel: %v %v", got, err)
	}
	close(eng.block)
	fg, err := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"x"}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Cancel(ctx, "a", fg.ID); !errors.Is(err, ErrConflict) {
		t.Errorf("cancelling a foreground response: %v, want conflict", err)
	}
}

func TestContextWindow(t *testing.T) {
	eng := &fakeEngine{contextLength: 40}
	svc, _ := newTestService(t, eng)
	ctx := context.Background()
	long := strings.Repeat("word ", 20)
	r1, err := svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","input":%q}`, long)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","input":%q,"previous_response_id":%q}`, long, r1.ID)), nil, nil)
	if !errors.Is(err, ErrContextLength) {
		t.Fatalf("disabled truncation: %v, want context length exceeded", err)
	}
	_, err = svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","input":"short","truncation":"auto","previous_response_id":%q,"instructions":"sys"}`, r1.ID)), nil, nil)
	if err != nil {
		t.Fatalf("auto truncation: %v", err)
	}
	reqs := eng.requests()
	last := reqs[len(reqs)-1]
	if len(last.Messages) != 2 || last.Messages[0].Role != "system" || *last.Messages[1].Content != "short" {
		t.Errorf("auto truncation kept %+v", last.Messages)
	}

	eng.status, eng.contextLength = 400, 0
	if _, err := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"x"}`), nil, nil); !errors.Is(err, ErrContextLength) {
		t.Errorf("engine 400 for length: %v, want context length exceeded", err)
	}
}

func TestFunctionCallRendering(t *testing.T) {
	eng := &fakeEngine{}
	svc, _ := newTestService(t, eng)
	ctx := context.Background()
	tools := `[{"type":"function","name":"weather","parameters":{"type":"object"}}]`
	r1, err := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"weather?","tools":`+tools+`}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Output) != 1 || r1.Output[0].Type != wire.ItemFunctionCall || r1.Output[0].Arguments != `{"city":"Paris"}` {
		t.Fatalf("output %+v", r1.Output)
	}
	body := fmt.Sprintf(`{"model":"m","previous_response_id":%q,"tools":%s,"input":[{"type":"function_call_output","call_id":%q,"output":"sunny"}]}`, r1.ID, tools, r1.Output[0].CallID)
	r2, err := svc.Create(ctx, "a", mustDecode(t, body), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Output[0].Text() != "echo: sunny" {
		t.Errorf("second turn %q", r2.Output[0].Text())
	}
	msgs := eng.requests()[1].Messages
	if len(msgs) != 3 || msgs[1].Role != "assistant" || len(msgs[1].ToolCalls) != 1 || msgs[2].Role != "tool" || msgs[2].ToolCallID != r1.Output[0].CallID {
		t.Errorf("rendered %+v", msgs)
	}
}

func TestRetention(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	st := openStoreWith(t, t.TempDir(), StoreOptions{TTL: time.Hour, Now: clock})
	defer st.Close()
	svc := New(st.StateStore, &fakeEngine{}, Config{CollectInterval: -1, Now: clock})
	svc.Start(t.Context())
	defer svc.Close(context.Background())
	ctx := context.Background()
	old, _ := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"old"}`), nil, nil)
	now = now.Add(50 * time.Minute)
	fresh, _ := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"fresh"}`), nil, nil)
	now = now.Add(20 * time.Minute)
	n, err := st.Collect(ctx, now)
	if err != nil || n != 2 {
		t.Errorf("collected %d (%v), want the old response and its chain", n, err)
	}
	if _, err := st.GetResponse(ctx, "a", old.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("expired response still there: %v", err)
	}
	if _, _, err := st.GetItem(ctx, "a", old.Output[0].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("expired item still there: %v", err)
	}
	if _, err := st.GetResponse(ctx, "a", fresh.ID); err != nil {
		t.Errorf("fresh response collected: %v", err)
	}
}

func TestConversationContext(t *testing.T) {
	eng := &fakeEngine{}
	svc, _ := newTestService(t, eng)
	ctx := context.Background()
	c, err := svc.CreateConversation(ctx, "a", []byte(`{"items":[{"role":"system","content":"sys"}],"metadata":{"k":"v"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"one", "two"} {
		if _, err := svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","input":%q,"conversation":{"id":%q}}`, in, c.ID)), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	msgs := eng.requests()[1].Messages
	if len(msgs) != 4 || *msgs[0].Content != "sys" || *msgs[3].Content != "two" {
		t.Errorf("conversation context %+v", msgs)
	}
	l, err := svc.ConversationItems(ctx, "a", c.ID, ListOptions{Order: "asc"})
	if err != nil || len(l.Data) != 5 {
		t.Fatalf("items: %v %v", l, err)
	}
	if _, err := svc.DeleteConversationItem(ctx, "a", c.ID, l.Data[0].ID); err != nil {
		t.Fatal(err)
	}
	if l, _ = svc.ConversationItems(ctx, "a", c.ID, ListOptions{}); len(l.Data) != 4 {
		t.Errorf("after deleting an item: %d items", len(l.Data))
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEngineFailureMidStream(t *testing.T) {
	svc, _ := newTestService(t, &fakeEngine{die: true})
	ctx := context.Background()
	var types []string
	var last []byte
	sink := SinkFunc(func(typ string, data []byte) error {
		types = append(types, typ)
		last = data
		return nil
	})
	resp, err := svc.Create(ctx, "a", mustDecode(t, `{"model":"m","input":"x","stream":true}`), nil, sink)
	if err != nil {
		t.Fatal(err)
	}
	if got := types[len(types)-1]; got != "response.failed" || !strings.Contains(string(last), `"status":"failed"`) {
		t.Fatalf("stream ended with %s: %s", got, last)
	}
	stored, err := svc.Get(ctx, "a", resp.ID)
	if err != nil || stored.Status != wire.StatusFailed || stored.Error == nil {
		t.Errorf("stored: %+v %v", stored, err)
	}
}

// TestChainSession: a chain's responses share the session its first
// response was counted in, whatever named it; a new chain is named after
// its first response only when the request names no session itself.
func TestChainSession(t *testing.T) {
	eng := &fakeEngine{contextLength: 100000}
	svc, st := newTestService(t, eng)
	var specs []dispatch.Spec
	eng.seen = func(s *dispatch.Spec) { specs = append(specs, *s) }
	ctx := t.Context()
	create := func(body string) *wire.Response {
		t.Helper()
		resp, err := svc.Create(ctx, "a", mustDecode(t, body), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	session := func(id string) string {
		t.Helper()
		rec, err := st.GetResponse(ctx, "a", id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Session
	}

	r1 := create(`{"model":"m","input":"hi","prompt_cache_key":"thread-1"}`)
	if s := specs[0]; s.PromptCacheKey != "thread-1" || s.NewChain != r1.ID || s.ChainRoot != "" {
		t.Errorf("first turn: prompt cache key %q, new chain %q, chain %q", s.PromptCacheKey, s.NewChain, s.ChainRoot)
	}
	if got := session(r1.ID); got != "thread-1" {
		t.Errorf("first response counted in session %q, want the prompt cache key", got)
	}
	r2 := create(`{"model":"m","input":"again","previous_response_id":"` + r1.ID + `"}`)
	if s := specs[1]; s.ChainRoot != "thread-1" || s.NewChain != "" {
		t.Errorf("second turn: chain %q, new chain %q; want the first turn's session", s.ChainRoot, s.NewChain)
	}
	if got := session(r2.ID); got != "thread-1" {
		t.Errorf("second response counted in session %q", got)
	}

	r3 := create(`{"model":"m","input":"alone"}`)
	if got := session(r3.ID); got != r3.ID {
		t.Errorf("a chain named by nothing: session %q, want its first response's id", got)
	}
	create(`{"model":"m","input":"on","previous_response_id":"` + r3.ID + `"}`)
	if s := specs[3]; s.ChainRoot != r3.ID {
		t.Errorf("its next turn: chain %q", s.ChainRoot)
	}

	create(`{"model":"m","input":"x","safety_identifier":"user-9","store":false}`)
	if s := specs[4]; s.SafetyIdentifier != "user-9" {
		t.Errorf("safety identifier %q not handed to the turn path", s.SafetyIdentifier)
	}
}

// TestHostedToolPolicy: hosted tools never reach the engine; dropped by
// default, counted by type, or refused naming the tool.
func TestHostedToolPolicy(t *testing.T) {
	const body = `{"model":"m","input":"find it","tools":[{"type":"function","name":"f"},{"type":"web_search","external_web_access":false},{"type":"file_search","vector_store_ids":["vs"]},{"type":"web_search"}]}`
	t.Run("drop", func(t *testing.T) {
		eng := &fakeEngine{contextLength: 100000}
		st := openStore(t, t.TempDir())
		reg := prometheus.NewRegistry()
		svc := New(st.StateStore, eng, Config{CollectInterval: -1, Metrics: reg})
		resp, err := svc.Create(t.Context(), "a", mustDecode(t, body), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sent := eng.requests()[0]
		if len(sent.Tools) != 1 || sent.Tools[0].Function.Name != "f" {
			t.Errorf("engine tools %+v, want f alone", sent.Tools)
		}
		if len(resp.Tools) != 4 {
			t.Errorf("the response echoes %d tools, want the 4 sent", len(resp.Tools))
		}
		want := `
# HELP turnpike_responses_hosted_tools_dropped_total Hosted tools (web_search, file_search, …) removed from Responses requests before they reached an engine, by tool type.
# TYPE turnpike_responses_hosted_tools_dropped_total counter
turnpike_responses_hosted_tools_dropped_total{type="file_search"} 1
turnpike_responses_hosted_tools_dropped_total{type="web_search"} 2
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "turnpike_responses_hosted_tools_dropped_total"); err != nil {
			t.Error(err)
		}
	})
	t.Run("reject", func(t *testing.T) {
		eng := &fakeEngine{contextLength: 100000}
		st := openStore(t, t.TempDir())
		svc := New(st.StateStore, eng, Config{CollectInterval: -1, HostedTools: HostedToolsReject})
		_, err := svc.Create(t.Context(), "a", mustDecode(t, body), nil, nil)
		var e *apierror.Error
		if !errors.As(err, &e) || e.Status != 400 || e.Param != "tools[1].type" || !strings.Contains(e.Message, "web_search") {
			t.Fatalf("got %v, want a 400 naming tools[1]", err)
		}
		if n := len(eng.requests()); n != 0 {
			t.Errorf("%d engine requests", n)
		}
		// A background request is refused before it is stored.
		_, err = svc.Create(t.Context(), "a", mustDecode(t, strings.Replace(body, `"input"`, `"background":true,"input"`, 1)), nil, nil)
		if !errors.As(err, &e) || e.Param != "tools[1].type" {
			t.Errorf("background: %v", err)
		}
	})
	t.Run("invalid policy", func(t *testing.T) {
		c := Config{HostedTools: "ignore"}
		c.EnsureDefaults()
		if c.Validate() == nil {
			t.Error("accepted an unknown policy")
		}
	})
}

// TestNamespacedCallMappedBack: a call the engine makes to a flattened
// namespaced function comes back as OpenAI returns it, the function's own
// name and its namespace, in the stream and the stored response; the next
// turn renders it flat again.
func TestNamespacedCallMappedBack(t *testing.T) {
	eng := &fakeEngine{contextLength: 100000}
	svc, _ := newTestService(t, eng)
	var events []string
	sink := SinkFunc(func(typ string, data []byte) error {
		events = append(events, string(data))
		return nil
	})
	body := `{"model":"m","input":"go","tools":[{"type":"namespace","name":"multi_agent_v1","description":"agents","tools":[{"type":"function","name":"spawn_agent","parameters":{"type":"object"}}]},{"type":"function","name":"exec_command"}]}`
	resp, err := svc.Create(t.Context(), "a", mustDecode(t, body), nil, sink)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 1 {
		t.Fatalf("output %+v", resp.Output)
	}
	call := resp.Output[0]
	if call.Type != wire.ItemFunctionCall || call.Name != "spawn_agent" || call.Namespace != "multi_agent_v1" {
		t.Fatalf("call %+v, want spawn_agent in multi_agent_v1", call)
	}
	b, _ := json.Marshal(call)
	if !strings.Contains(string(b), `"name":"spawn_agent","namespace":"multi_agent_v1"`) {
		t.Errorf("call encoded as %s", b)
	}
	for _, ev := range events {
		if strings.Contains(ev, "multi_agent_v1__") {
			t.Errorf("an event shows the engine's flat name: %s", ev)
		}
	}
	got, err := svc.Get(t.Context(), "a", resp.ID)
	if err != nil || got.Output[0].Namespace != "multi_agent_v1" {
		t.Fatalf("stored call %+v, %v", got.Output, err)
	}
	next := `{"model":"m","previous_response_id":"` + resp.ID + `","input":[{"type":"function_call_output","call_id":"` + call.CallID + `","output":"ok"}]}`
	if _, err := svc.Create(t.Context(), "a", mustDecode(t, next), nil, nil); err != nil {
		t.Fatal(err)
	}
	reqs := eng.requests()
	m := reqs[len(reqs)-1].Messages
	if len(m) < 2 || len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0].Function.Name != "multi_agent_v1__spawn_agent" {
		t.Errorf("the next turn renders the call as %+v", m)
	}
}
