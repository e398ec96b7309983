package driver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// TestSendFailureKinds: what a request saw before it failed, as the
// client can tell: an HTTP error before any event, or a stream that ended
// without its end after events had come.
func TestSendFailureKinds(t *testing.T) {
	chatChunk := `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n"
	respDelta := `event: response.output_text.delta` + "\n" +
		`data: {"type":"response.output_text.delta","sequence_number":1,"item_id":"m","output_index":0,"content_index":0,"delta":"tok "}` + "\n\n"
	tests := []struct {
		name, api    string
		status       int
		body         string
		wantClass    string
		wantCode     string
		wantStreamed bool
	}{
		{name: "chat cut without a finish reason", api: workload.APIChat, status: 200, body: chatChunk + chatChunk,
			wantClass: ErrClassStream, wantStreamed: true},
		{name: "chat cut with [DONE] but no finish reason", api: workload.APIChat, status: 200, body: chatChunk + "data: [DONE]\n\n",
			wantClass: ErrClassStream, wantStreamed: true},
		{name: "responses cut before completed", api: workload.APIResponses, status: 200, body: respDelta,
			wantClass: ErrClassStream, wantStreamed: true},
		{name: "no endpoints", api: workload.APIChat, status: 503,
			body:      `{"error":{"message":"no endpoint","type":"server_error","param":null,"code":"no-endpoints"}}`,
			wantClass: "http_503", wantCode: "no-endpoints"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.status == 200 {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			defer srv.Close()
			s := newSender(workload.Config{Model: "m"}, Target{BaseURL: srv.URL}, true)
			s.prepare("")
			o := s.send(context.Background(), Call{API: tt.api, Input: []workload.Item{{Kind: workload.ItemMessage, Role: "user", Text: "hi"}}, MaxTokens: 4})
			if o.errClass != tt.wantClass || o.errCode != tt.wantCode || o.streamed != tt.wantStreamed {
				t.Errorf("class %q code %q streamed %v; want %q %q %v", o.errClass, o.errCode, o.streamed, tt.wantClass, tt.wantCode, tt.wantStreamed)
			}
		})
	}
}

// TestTenantsHaveTheirOwnConnections: a tenant's request never rides a
// connection another tenant's client opened, so one tenant's burst cannot
// take the idle connections another's next request would use. Within a
// tenant, connections are reused.
func TestTenantsHaveTheirOwnConnections(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]string{} // remote address → key
	reused := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Authorization")
		mu.Lock()
		if k, ok := conns[r.RemoteAddr]; ok {
			if k != key {
				t.Errorf("connection %s opened for %q carried a request of %q", r.RemoteAddr, k, key)
			}
			reused = true
		}
		conns[r.RemoteAddr] = key
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	s := newSender(workload.Config{Model: "m"}, Target{BaseURL: srv.URL}, false)
	s.prepare("key-a", "key-b")
	for _, key := range []string{"key-a", "key-b", "key-a", "key-b"} {
		s.send(context.Background(), Call{API: workload.APIChat, Key: key, Input: []workload.Item{{Kind: workload.ItemMessage, Role: "user", Text: "hi"}}, MaxTokens: 4})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 2 || !reused {
		t.Errorf("%d connections for 2 tenants (reused: %v); want one each, reused", len(conns), reused)
	}
}
