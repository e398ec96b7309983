package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkProxyChat measures the gateway's own cost per chat completion:
// decode, route, forward, relay, against an engine that answers at once.
func BenchmarkProxyChat(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := "non-stream"
		body := chatBody
		if stream {
			name = "stream"
			body = `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		b.Run(name, func(b *testing.B) {
			s, _, _ := newGateway(b, nil, newBackend(b, okChat))
			h := s.Handler()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body.String())
					}
				}
			})
		})
	}
}
