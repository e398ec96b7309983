package gatewaytest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// WSEvent is the part of a Responses WebSocket event the tests read.
type WSEvent struct {
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

// DialResponses opens a Responses WebSocket connection to st, closed
// when the test ends.
func DialResponses(t *testing.T, st *Stack) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(st.Front.URL, "http")+"/v1/responses", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

// WSSend sends msg as a text message.
func WSSend(t *testing.T, conn *websocket.Conn, msg string) {
	t.Helper()
	if err := conn.Write(t.Context(), websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// WSRead reads one event.
func WSRead(t *testing.T, conn *websocket.Conn) WSEvent {
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
	var ev WSEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return ev
}

// WSTurn reads one response's events up to its end, checking their
// order, and returns the ended response's id and the terminal event.
func WSTurn(t *testing.T, conn *websocket.Conn) (string, WSEvent) {
	t.Helper()
	for seq := 0; ; seq++ {
		ev := WSRead(t, conn)
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
