package api

import (
	"errors"
	"net/http"
	"testing"

	"github.com/turnpike-gateway/turnpike/apierror"
)

// FuzzWebSocketMessage: whatever a client sends on a Responses WebSocket
// connection decodes to a streamed, foreground request or to an
// OpenAI-shaped 400 naming what is wrong; it never panics.
func FuzzWebSocketMessage(f *testing.F) {
	for _, seed := range []string{
		`{"type":"response.create","model":"m","input":"hi"}`,
		`{"type":"response.create","model":"m","input":"hi","generate":false,"store":false}`,
		`{"type":"response.create","model":"m","input":[{"role":"user","content":"hi"}],"previous_response_id":"resp_1","stream":false}`,
		`{"type":"response.create","model":"m","input":"hi","stream_id":"a"}`,
		`{"type":"response.create","model":"m","input":"hi","background":true}`,
		`{"type":"response.create","model":"m","generate":1}`,
		`{"type":"response.steer","previous_response_id":"resp_1","input":"x"}`,
		`{"type":7}`,
		`[]`,
		`null`,
		`not json`,
	} {
		f.Add([]byte(seed))
	}
	ws := &wsConn{}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, _, err := ws.decode(data)
		if err != nil {
			var e *apierror.Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Message == "" {
				t.Fatalf("decode error %v is not an OpenAI-shaped 400", err)
			}
			return
		}
		if !req.Stream || req.Background || req.Model == "" {
			t.Fatalf("decoded %s to stream %v, background %v, model %q", data, req.Stream, req.Background, req.Model)
		}
	})
}
