package mcpclient

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/responses/mcpclient/mcptest"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// TestListAndCall: a server's tools are listed and called over one
// connection per response, with the server's headers on every request; a
// tool's own failure is an mcp_tool_execution_error with its content.
func TestListAndCall(t *testing.T) {
	calc := mcptest.NewCalc(t)
	c := &Client{Timeout: 10 * time.Second}
	ss := c.Open()
	defer ss.Close()
	srv := &wire.MCPServer{Label: "calc", URL: calc.URL, Headers: map[string]string{"X-Key": "k-1"}}

	tools, err := ss.List(t.Context(), srv)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]wire.MCPListedTool{}
	for _, tool := range tools {
		names[tool.Name] = tool
	}
	if len(tools) != 2 || names["add"].Description != "Add two integers." || !strings.Contains(string(names["add"].InputSchema), `"a"`) {
		t.Fatalf("tools %+v", tools)
	}

	out, err := ss.Call(t.Context(), srv, "add", `{"a":2,"b":3}`)
	if err != nil || out != "5" {
		t.Fatalf("add: %q, %v; want 5", out, err)
	}
	_, err = ss.Call(t.Context(), srv, "fail", `{"a":1,"b":1}`)
	var got struct {
		Type    string `json:"type"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err == nil || json.Unmarshal([]byte(CallError(err)), &got) != nil || got.Type != "mcp_tool_execution_error" ||
		len(got.Content) != 1 || got.Content[0].Text != "disk on fire" {
		t.Fatalf("fail: %v, written %s; want the tool's failure", err, CallError(err))
	}
	if n := ss.Calls(); n != 2 {
		t.Errorf("%d calls counted, want 2", n)
	}
	if len(ss.conns) != 1 {
		t.Errorf("%d connections for one server, want 1", len(ss.conns))
	}
	for i, k := range calc.Keys() {
		if k != "k-1" {
			t.Errorf("request %d carried X-Key %q, want the server's header", i, k)
		}
	}
}

// TestAllowRefuses: a server Allow refuses is never reached: the list or
// call fails with Allow's error, and the call still counts.
func TestAllowRefuses(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	refused := errors.New("not allowed")
	c := &Client{Allow: func(url string) error {
		if url != srv.URL {
			t.Errorf("Allow asked of %q", url)
		}
		return refused
	}}
	ss := c.Open()
	defer ss.Close()
	mcpSrv := &wire.MCPServer{Label: "x", URL: srv.URL}
	if _, err := ss.List(t.Context(), mcpSrv); !errors.Is(err, refused) {
		t.Errorf("list: %v, want Allow's error", err)
	}
	if _, err := ss.Call(t.Context(), mcpSrv, "add", `{}`); !errors.Is(err, refused) {
		t.Errorf("call: %v, want Allow's error", err)
	}
	if hits.Load() != 0 || len(ss.conns) != 0 || ss.Calls() != 1 {
		t.Errorf("%d requests, %d connections, %d calls; want 0, 0, 1", hits.Load(), len(ss.conns), ss.Calls())
	}
}

// TestCallError: arguments that are not a JSON object, and any failure
// that is not the tool's own, are an mcp_protocol_error.
func TestCallError(t *testing.T) {
	ss := (&Client{Allow: func(string) error { t.Fatal("a call with bad arguments connected"); return nil }}).Open()
	_, err := ss.Call(t.Context(), &wire.MCPServer{Label: "x", URL: "http://127.0.0.1:1/mcp"}, "add", `[1]`)
	if err == nil || !strings.Contains(err.Error(), "the arguments are not a JSON object") {
		t.Fatalf("bad arguments: %v", err)
	}
	if got, want := CallError(err), wire.MCPProtocolError(err.Error()); got != want {
		t.Errorf("CallError = %s, want %s", got, want)
	}
}
