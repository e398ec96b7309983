package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
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
		{name: "chat cut without a finish reason", api: APIChat, status: 200, body: chatChunk + chatChunk,
			wantClass: ErrClassStream, wantStreamed: true},
		{name: "chat cut with [DONE] but no finish reason", api: APIChat, status: 200, body: chatChunk + "data: [DONE]\n\n",
			wantClass: ErrClassStream, wantStreamed: true},
		{name: "responses cut before completed", api: APIResponses, status: 200, body: respDelta,
			wantClass: ErrClassStream, wantStreamed: true},
		{name: "no endpoints", api: APIChat, status: 503,
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
			s := newSender(Config{Model: "m"}, Target{BaseURL: srv.URL}, true)
			s.prepare("")
			o := s.send(context.Background(), call{api: tt.api, input: []Item{{Kind: ItemMessage, Role: "user", Text: "hi"}}, maxTokens: 4})
			if o.errClass != tt.wantClass || o.errCode != tt.wantCode || o.streamed != tt.wantStreamed {
				t.Errorf("class %q code %q streamed %v; want %q %q %v", o.errClass, o.errCode, o.streamed, tt.wantClass, tt.wantCode, tt.wantStreamed)
			}
		})
	}
}
