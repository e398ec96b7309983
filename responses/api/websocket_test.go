package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/gateway"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
)

func TestWebSocketResponsesInOrder(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	conn := gatewaytest.DialResponses(t, st)
	// Both sent at once: answered one after another.
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Say one.","max_output_tokens":8}`)
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Say two.","max_output_tokens":8,"stream":true}`)
	id1, end1 := gatewaytest.WSTurn(t, conn)
	id2, end2 := gatewaytest.WSTurn(t, conn)
	if end1.Type != "response.completed" || end2.Type != "response.completed" {
		t.Errorf("ends %s, %s", end1.Type, end2.Type)
	}
	if id1 == id2 || !strings.HasPrefix(id1, "resp_") {
		t.Errorf("ids %s, %s", id1, id2)
	}
	// Stored by default, so HTTP sees them.
	r, err := st.Client.Responses.Get(t.Context(), id2, responses.ResponseGetParams{})
	if err != nil || r.Status != responses.ResponseStatusCompleted {
		t.Fatalf("get %s: %v %v", id2, r, err)
	}
}

func TestWebSocketChainWithoutStore(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	conn := gatewaytest.DialResponses(t, st)
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"input":"The secret word is pelican.","max_output_tokens":8}`)
	id1, _ := gatewaytest.WSTurn(t, conn)
	// Not in the store...
	if _, err := st.Client.Responses.Get(t.Context(), id1, responses.ResponseGetParams{}); err == nil {
		t.Fatal("a store:false response is retrievable")
	}
	// ...yet the connection continues it.
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"previous_response_id":"`+id1+`","input":"What is the secret word?","max_output_tokens":8}`)
	id2, end := gatewaytest.WSTurn(t, conn)
	if end.Type != "response.completed" {
		t.Fatalf("second turn %s", end.Type)
	}
	body := st.Engine.Last()
	if !strings.Contains(body, "pelican") || !strings.Contains(body, "What is the secret word?") {
		t.Errorf("engine request lacks the earlier context: %s", body)
	}
	// And a third turn carries both earlier ones.
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"previous_response_id":"`+id2+`","input":"Again?","max_output_tokens":8}`)
	gatewaytest.WSTurn(t, conn)
	body = st.Engine.Last()
	if !strings.Contains(body, "pelican") || !strings.Contains(body, "What is the secret word?") || !strings.Contains(body, "Again?") {
		t.Errorf("third engine request lacks the earlier context: %s", body)
	}
	// An id the connection does not hold is not found, as over HTTP.
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"previous_response_id":"`+id1+`","input":"x"}`)
	if ev := gatewaytest.WSRead(t, conn); ev.Type != "error" || ev.Error == nil || ev.Error.Code == nil || *ev.Error.Code != "previous_response_not_found" {
		t.Errorf("stale previous_response_id: %+v", ev)
	}
}

func TestWebSocketBadMessageKeepsConnection(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	conn := gatewaytest.DialResponses(t, st)
	for _, msg := range []string{
		`not json`,
		`{"type":"response.cancel"}`,
		`{"type":"response.create","model":"` + testModel + `","input":"x","bogus":1}`,
	} {
		gatewaytest.WSSend(t, conn, msg)
		ev := gatewaytest.WSRead(t, conn)
		if ev.Type != "error" || ev.Error == nil || ev.Error.Message == "" {
			t.Errorf("%s: %+v", msg, ev)
		}
	}
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Still there?","max_output_tokens":8}`)
	if _, end := gatewaytest.WSTurn(t, conn); end.Type != "response.completed" {
		t.Errorf("after errors: %s", end.Type)
	}
}

func TestWebSocketDisconnectCancels(t *testing.T) {
	st := gatewaytest.NewStack(t, 1, mount)
	conn := gatewaytest.DialResponses(t, st)
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Write at length.","max_output_tokens":20000}`)
	var id string
	for id == "" {
		if ev := gatewaytest.WSRead(t, conn); ev.Type == "response.created" {
			id = ev.Response.ID
		}
	}
	conn.CloseNow()
	// The engine request is cancelled with the turn.
	waitIdle(t, st.Engine)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := st.Client.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
		if err == nil && r.Status == responses.ResponseStatusCancelled {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after disconnect: %v %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestWebSocketConnectionLimit(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mountWith(func(o *gateway.Options) { o.WebSocketLimit = 300 * time.Millisecond }))
	conn := gatewaytest.DialResponses(t, st)
	gatewaytest.WSSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Hi.","max_output_tokens":4}`)
	gatewaytest.WSTurn(t, conn)
	ev := gatewaytest.WSRead(t, conn)
	if ev.Type != "error" || ev.Error == nil || ev.Error.Code == nil || *ev.Error.Code != "websocket_connection_limit_reached" {
		t.Fatalf("at the limit: %+v", ev)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the limit: %v", err)
	}
}

// sdkConn opens a Responses WebSocket connection with the OpenAI Go SDK.
func sdkConn(t *testing.T, st *gatewaytest.Stack) *responses.ResponseConnection {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := st.Client.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Abort)
	return conn
}

func sdkSend(t *testing.T, conn *responses.ResponseConnection, msg string) {
	t.Helper()
	if err := conn.SendRaw(t.Context(), json.RawMessage(msg)); err != nil {
		t.Fatal(err)
	}
}

// sdkTurn reads one response's events up to its end and returns them.
func sdkTurn(t *testing.T, conn *responses.ResponseConnection) []gatewaytest.WSEvent {
	t.Helper()
	var evs []gatewaytest.WSEvent
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		raw, err := conn.RecvRaw(ctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d events: %v", len(evs), err)
		}
		var ev gatewaytest.WSEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		evs = append(evs, ev)
		switch ev.Type {
		case "response.completed", "response.incomplete", "response.failed", "response.cancelled", "error":
			return evs
		}
	}
}

// answered reports whether ev ends a response with its answer, whole or
// cut at max_output_tokens.
func answered(ev gatewaytest.WSEvent) bool {
	return ev.Type == "response.completed" || ev.Type == "response.incomplete"
}

// TestWebSocketWarmup: a response.create with generate:false (as the
// Codex CLI sends to prepare a turn) answers a response with no output
// without reaching an engine, and the turn that continues it carries its
// input.
func TestWebSocketWarmup(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := gatewaytest.NewStack(t, 0, mountWith(func(o *gateway.Options) { o.Metrics = reg }))
	conn := sdkConn(t, st)
	err := conn.Create(t.Context(), responses.ResponsesClientEventResponseCreateParam{
		Model:    testModel,
		Generate: param.NewOpt(false),
		Store:    param.NewOpt(false),
		Input:    responses.ResponsesClientEventResponseCreateInputUnionParam{OfString: param.NewOpt("The secret word is pelican.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	evs := sdkTurn(t, conn)
	if len(evs) != 2 || evs[0].Type != "response.created" || evs[1].Type != "response.completed" || evs[1].SequenceNumber != 1 {
		t.Fatalf("warmup events %+v", evs)
	}
	warm := evs[1].Response.ID
	if !strings.HasPrefix(warm, "resp_") || st.Engine.Count() != 0 {
		t.Fatalf("warmup id %q, engine requests %d", warm, st.Engine.Count())
	}
	sdkSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"previous_response_id":"`+warm+`","input":"What is the secret word?","max_output_tokens":8}`)
	evs = sdkTurn(t, conn)
	end := evs[len(evs)-1]
	if !answered(end) {
		t.Fatalf("turn after the warmup ended %+v", end)
	}
	body := st.Engine.Last()
	if !strings.Contains(body, "pelican") || !strings.Contains(body, "What is the secret word?") {
		t.Errorf("the turn after the warmup lacks its input: %s", body)
	}
	// Chained on from there, the warmup's input stays in the context.
	sdkSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"previous_response_id":"`+end.Response.ID+`","input":"Again?","max_output_tokens":8}`)
	sdkTurn(t, conn)
	if body := st.Engine.Last(); !strings.Contains(body, "pelican") || !strings.Contains(body, "Again?") {
		t.Errorf("third turn lacks the context: %s", body)
	}
	if st.Engine.Count() != 2 {
		t.Errorf("engine requests %d, want 2", st.Engine.Count())
	}
	// generate must be a boolean; stream_id multiplexing is refused.
	for _, msg := range []string{
		`{"type":"response.create","model":"` + testModel + `","input":"x","generate":"no"}`,
		`{"type":"response.create","model":"` + testModel + `","input":"x","stream_id":"a"}`,
	} {
		sdkSend(t, conn, msg)
		if evs := sdkTurn(t, conn); evs[0].Type != "error" || evs[0].Error == nil || evs[0].Error.Code == nil {
			t.Errorf("%s: %+v", msg, evs)
		}
	}
	// A connection answers its messages in turn, so once the last error
	// has arrived every message before it has been counted.
	m := "turnpike_websocket_messages_total"
	if w, r := counter(t, reg, m, "kind", "warmup"), counter(t, reg, m, "kind", "response"); w != 1 || r != 2 {
		t.Errorf("messages counted: %v warmups, %v responses", w, r)
	}
}

// TestWebSocketStaysOnOneReplica: the turns of one connection, unrelated
// to one another (no session, no chain), all go to the replica its first
// turn went to, where round-robin over HTTP spreads them.
func TestWebSocketStaysOnOneReplica(t *testing.T) {
	st := gatewaytest.NewFleet(t, sim.Config{}, tpresponses.Config{}, 3, mount)
	counts := func() []int {
		var out []int
		for _, e := range st.Engines {
			out = append(out, e.Count())
		}
		return out
	}
	for i := range 3 {
		if _, err := st.Client.Responses.New(t.Context(), responses.ResponseNewParams{
			Model: testModel, Input: gatewaytest.Text(fmt.Sprintf("HTTP question %d", i)), MaxOutputTokens: openai.Int(4), Store: openai.Bool(false),
		}); err != nil {
			t.Fatal(err)
		}
	}
	before := counts()
	if slices.Max(before) == 3 {
		t.Fatalf("round-robin over HTTP sent every turn to one engine (%v); the test needs it to spread", before)
	}
	conn := sdkConn(t, st)
	const n = 5
	for i := range n {
		sdkSend(t, conn, fmt.Sprintf(`{"type":"response.create","model":"%s","store":false,"input":"Question %d","max_output_tokens":4}`, testModel, i))
		if evs := sdkTurn(t, conn); !answered(evs[len(evs)-1]) {
			t.Fatalf("turn %d: %+v", i, evs[len(evs)-1])
		}
	}
	after := counts()
	var served []int
	for i := range after {
		if after[i] != before[i] {
			served = append(served, i)
		}
	}
	if len(served) != 1 || after[served[0]]-before[served[0]] != n {
		t.Errorf("engine requests before %v, after %v: want all %d turns of the connection on one engine", before, after, n)
	}
}

// TestWebSocketLimitMidTurn: a connection that reaches its limit while a
// turn streams ends that turn with its final event (response.failed,
// saying why), then sends the limit error and closes; the engine request
// is cancelled.
func TestWebSocketLimitMidTurn(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := gatewaytest.NewStack(t, 1, mountWith(func(o *gateway.Options) { o.WebSocketLimit, o.Metrics = 500*time.Millisecond, reg }))
	conn := sdkConn(t, st)
	sdkSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Write at length.","max_output_tokens":20000}`)
	evs := sdkTurn(t, conn)
	end := evs[len(evs)-1]
	if end.Type != "response.failed" || len(evs) < 3 {
		t.Fatalf("turn at the limit ended with %+v after %d events", end, len(evs))
	}
	evs = sdkTurn(t, conn)
	if ev := evs[0]; ev.Type != "error" || ev.Error == nil || ev.Error.Code == nil || *ev.Error.Code != "websocket_connection_limit_reached" {
		t.Fatalf("after the turn: %+v", evs)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := conn.RecvRaw(ctx); err == nil {
		t.Error("the connection stayed open after the limit")
	}
	waitIdle(t, st.Engine)
	if n := counter(t, reg, "turnpike_websocket_closed_total", "reason", "limit"); n != 1 {
		t.Errorf("connections closed at the limit: %v", n)
	}
}

// waitIdle waits until the engine answers no request.
func waitIdle(t *testing.T, e *gatewaytest.Recorder) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.Active.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the engine still answers %d requests", e.Active.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkWebSocketTurn: one Responses turn on an open WebSocket
// connection, store:false and chained to the connection's last response
// (the context the connection keeps grows by one short exchange a turn),
// against a simulated engine that answers at once.
func BenchmarkWebSocketTurn(b *testing.B) {
	st := gatewaytest.NewStack(b, 0, mount)
	ctx := b.Context()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(st.Front.URL, "http")+"/v1/responses", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(-1)
	prev := ""
	b.ReportAllocs()
	for b.Loop() {
		msg := `{"type":"response.create","model":"` + testModel + `","store":false,"input":"Next step?","max_output_tokens":16`
		if prev != "" {
			msg += `,"previous_response_id":"` + prev + `"`
		}
		if err := conn.Write(ctx, websocket.MessageText, []byte(msg+"}")); err != nil {
			b.Fatal(err)
		}
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if !bytes.Contains(data[:min(len(data), 48)], []byte(`"type":"response.completed"`)) &&
				!bytes.Contains(data[:min(len(data), 48)], []byte(`"type":"response.incomplete"`)) {
				if bytes.HasPrefix(data, []byte(`{"type":"error"`)) || bytes.HasPrefix(data, []byte(`{"type":"response.failed"`)) {
					b.Fatalf("%s", data)
				}
				continue
			}
			var ev gatewaytest.WSEvent
			if err := json.Unmarshal(data, &ev); err != nil {
				b.Fatal(err)
			}
			prev = ev.Response.ID
			break
		}
	}
}

// TestWebSocketWarmupIsAResponse: the warmup's response object is made by
// the constructor every response is made by, so it echoes what the
// request set (user, safety_identifier, max_tool_calls, top_logprobs,
// prompt_cache_retention…) and has the members an HTTP create's response
// has (issue 32, item 8: it was built by hand and had drifted).
func TestWebSocketWarmupIsAResponse(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	conn := sdkConn(t, st)
	const fields = `"model":"` + testModel + `","store":false,"input":"hi","user":"u-1","safety_identifier":"sid-1","max_tool_calls":3,` +
		`"top_logprobs":2,"prompt_cache_retention":"24h","prompt_cache_key":"k-1","metadata":{"a":"b"},"max_output_tokens":8`
	sdkSend(t, conn, `{"type":"response.create","generate":false,`+fields+`}`)
	var members []map[string]json.RawMessage
	for range 2 {
		raw, err := conn.RecvRaw(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var ev struct {
			Response map[string]json.RawMessage `json:"response"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		members = append(members, ev.Response)
	}
	warm := members[1]
	for k, want := range map[string]string{"user": `"u-1"`, "safety_identifier": `"sid-1"`, "max_tool_calls": `3`,
		"top_logprobs": `2`, "prompt_cache_retention": `"24h"`, "prompt_cache_key": `"k-1"`, "status": `"completed"`} {
		if got := string(warm[k]); got != want {
			t.Errorf("warmup response %s = %s, want %s", k, got, want)
		}
	}
	resp, err := http.Post(st.Front.URL+"/v1/responses", "application/json", strings.NewReader(`{`+fields+`}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var created map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("create: %d %v", resp.StatusCode, err)
	}
	for k := range created {
		if _, ok := warm[k]; !ok {
			t.Errorf("the warmup's response lacks %q, which a created response has", k)
		}
	}
}
