package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3/responses"
)

// wsEventMsg is the part of a WebSocket event the tests read.
type wsEventMsg struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
	Response       *struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"response"`
	Error *struct {
		Code    *string `json:"code"`
		Message string  `json:"message"`
	} `json:"error"`
}

func dialResponses(t *testing.T, st *responsesStack) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(st.front.URL, "http")+"/v1/responses", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

func wsSend(t *testing.T, conn *websocket.Conn, msg string) {
	t.Helper()
	if err := conn.Write(t.Context(), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func wsRead(t *testing.T, conn *websocket.Conn) wsEventMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	typ, data, err := conn.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if typ != websocket.MessageText {
		t.Fatalf("message type %v", typ)
	}
	var ev wsEventMsg
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return ev
}

// wsTurn reads one response's events up to its end, checking their
// order, and returns the ended response's id and the terminal event.
func wsTurn(t *testing.T, conn *websocket.Conn) (string, wsEventMsg) {
	t.Helper()
	for seq := 0; ; seq++ {
		ev := wsRead(t, conn)
		if ev.Type == "error" {
			t.Fatalf("error event: %+v", ev.Error)
		}
		if ev.SequenceNumber != seq {
			t.Fatalf("event %s has sequence number %d, want %d", ev.Type, ev.SequenceNumber, seq)
		}
		if seq == 0 && ev.Type != "response.created" {
			t.Fatalf("first event %s", ev.Type)
		}
		switch ev.Type {
		case "response.completed", "response.incomplete", "response.failed", "response.cancelled":
			return ev.Response.ID, ev
		}
	}
}

func TestWebSocketResponsesInOrder(t *testing.T) {
	st := newResponsesStack(t, 0)
	conn := dialResponses(t, st)
	// Both sent at once: answered one after another.
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Say one.","max_output_tokens":8}`)
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Say two.","max_output_tokens":8,"stream":true}`)
	id1, end1 := wsTurn(t, conn)
	id2, end2 := wsTurn(t, conn)
	if end1.Type != "response.completed" || end2.Type != "response.completed" {
		t.Errorf("ends %s, %s", end1.Type, end2.Type)
	}
	if id1 == id2 || !strings.HasPrefix(id1, "resp_") {
		t.Errorf("ids %s, %s", id1, id2)
	}
	// Stored by default, so HTTP sees them.
	r, err := st.client.Responses.Get(t.Context(), id2, responses.ResponseGetParams{})
	if err != nil || r.Status != responses.ResponseStatusCompleted {
		t.Fatalf("get %s: %v %v", id2, r, err)
	}
}

func TestWebSocketChainWithoutStore(t *testing.T) {
	st := newResponsesStack(t, 0)
	conn := dialResponses(t, st)
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"input":"The secret word is pelican.","max_output_tokens":8}`)
	id1, _ := wsTurn(t, conn)
	// Not in the store...
	if _, err := st.client.Responses.Get(t.Context(), id1, responses.ResponseGetParams{}); err == nil {
		t.Fatal("a store:false response is retrievable")
	}
	// ...yet the connection continues it.
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"previous_response_id":"`+id1+`","input":"What is the secret word?","max_output_tokens":8}`)
	id2, end := wsTurn(t, conn)
	if end.Type != "response.completed" {
		t.Fatalf("second turn %s", end.Type)
	}
	body := st.engine.last()
	if !strings.Contains(body, "pelican") || !strings.Contains(body, "What is the secret word?") {
		t.Errorf("engine request lacks the earlier context: %s", body)
	}
	// And a third turn carries both earlier ones.
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"previous_response_id":"`+id2+`","input":"Again?","max_output_tokens":8}`)
	wsTurn(t, conn)
	body = st.engine.last()
	if !strings.Contains(body, "pelican") || !strings.Contains(body, "What is the secret word?") || !strings.Contains(body, "Again?") {
		t.Errorf("third engine request lacks the earlier context: %s", body)
	}
	// An id the connection does not hold is not found, as over HTTP.
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","store":false,"previous_response_id":"`+id1+`","input":"x"}`)
	if ev := wsRead(t, conn); ev.Type != "error" || ev.Error == nil || ev.Error.Code == nil || *ev.Error.Code != "previous_response_not_found" {
		t.Errorf("stale previous_response_id: %+v", ev)
	}
}

func TestWebSocketBadMessageKeepsConnection(t *testing.T) {
	st := newResponsesStack(t, 0)
	conn := dialResponses(t, st)
	for _, msg := range []string{
		`not json`,
		`{"type":"response.cancel"}`,
		`{"type":"response.create","model":"` + testModel + `","input":"x","bogus":1}`,
	} {
		wsSend(t, conn, msg)
		ev := wsRead(t, conn)
		if ev.Type != "error" || ev.Error == nil || ev.Error.Message == "" {
			t.Errorf("%s: %+v", msg, ev)
		}
	}
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Still there?","max_output_tokens":8}`)
	if _, end := wsTurn(t, conn); end.Type != "response.completed" {
		t.Errorf("after errors: %s", end.Type)
	}
}

func TestWebSocketDisconnectCancels(t *testing.T) {
	st := newResponsesStack(t, 1)
	conn := dialResponses(t, st)
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Write at length.","max_output_tokens":20000}`)
	var id string
	for id == "" {
		if ev := wsRead(t, conn); ev.Type == "response.created" {
			id = ev.Response.ID
		}
	}
	conn.CloseNow()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := st.client.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
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
	st := newResponsesStack(t, 0)
	st.server.opts.WebSocketLimit = 300 * time.Millisecond
	conn := dialResponses(t, st)
	wsSend(t, conn, `{"type":"response.create","model":"`+testModel+`","input":"Hi.","max_output_tokens":4}`)
	wsTurn(t, conn)
	ev := wsRead(t, conn)
	if ev.Type != "error" || ev.Error == nil || ev.Error.Code == nil || *ev.Error.Code != "websocket_connection_limit_reached" {
		t.Fatalf("at the limit: %+v", ev)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, _, err := conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the limit: %v", err)
	}
}
