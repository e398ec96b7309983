package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	tpresponses "github.com/turnpike-gateway/turnpike/responses"
)

// countingListener counts the writes to the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// countingFront serves h and counts its writes to clients.
func countingFront(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var writes atomic.Int64
	front := httptest.NewUnstartedServer(h)
	front.Listener = countingListener{front.Listener, &writes}
	front.Start()
	t.Cleanup(front.Close)
	return front, &writes
}

// A burst of events the engine sent at once reaches the client in a few
// writes, not one a token, on the chat relay and on the Responses stream;
// every event still arrives.
func TestStreamBurstGoesOutInFewWrites(t *testing.T) {
	const tokens = 40
	t.Run("chat", func(t *testing.T) {
		s, _, _ := newGateway(t, nil, newBackend(t, burstEngine(tokens)))
		front, writes := countingFront(t, s.Handler())
		resp := post(t, front.URL, `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		body, _ := io.ReadAll(resp.Body)
		if got := strings.Count(string(body), "\"content\":\"t"); got != tokens || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("the client got %d of %d tokens, ending %q", got, tokens, body[max(len(body)-40, 0):])
		}
		if n := writes.Load(); n > 16 {
			t.Errorf("%d writes to the client for a burst of %d tokens, want a few", n, tokens)
		}
	})
	t.Run("responses", func(t *testing.T) {
		st := newResponsesOn(t, tpresponses.Config{}, burstEngine(tokens))
		front, writes := countingFront(t, st.server.Handler())
		resp, err := http.Post(front.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"test-model","input":"hi","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := strings.Count(string(body), "event: response.output_text.delta"); got != tokens || !strings.Contains(string(body), "event: response.completed") {
			t.Fatalf("the client got %d of %d deltas: %.300s", got, tokens, body)
		}
		if n := writes.Load(); n > 16 {
			t.Errorf("%d writes to the client for a burst of %d tokens, want a few", n, tokens)
		}
	})
}

// An event is sent on as soon as it is read when the engine has sent
// nothing after it: the Responses stream's client sees a delta while the
// engine still waits to send the next.
func TestResponsesStreamIsIncremental(t *testing.T) {
	release := make(chan struct{})
	st := newResponsesOn(t, tpresponses.Config{}, firstThenWait(release))
	resp, err := http.Post(st.front.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"test-model","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before the first delta: %v", err)
		}
		if strings.Contains(line, `"delta":"first"`) {
			break
		}
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"delta":" second"`) || !strings.Contains(string(rest), "event: response.completed") {
		t.Fatalf("the rest of the stream is missing: %.300s", rest)
	}
}
