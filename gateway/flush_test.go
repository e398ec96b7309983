package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/dispatch"
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

// chatStreamWrites streams a chat answer of tokens through h to a client,
// checks that every token and the end arrived, and returns the writes to
// the client it took.
func chatStreamWrites(t *testing.T, h http.Handler, tokens int) int64 {
	t.Helper()
	front, writes := countingFront(t, h)
	resp := post(t, front.URL, `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	body, _ := io.ReadAll(resp.Body)
	if got := strings.Count(string(body), "\"content\":\"t"); got != tokens || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("the client got %d of %d tokens, ending %q", got, tokens, body[max(len(body)-40, 0):])
	}
	return writes.Load()
}

// responsesStreamWrites is chatStreamWrites for a Responses stream: it
// checks that the deltas' texts joined are every token's, in order, and
// returns the writes to the client and the delta events it took.
func responsesStreamWrites(t *testing.T, h http.Handler, tokens int) (writes, deltas int64) {
	t.Helper()
	front, n := countingFront(t, h)
	resp, err := http.Post(front.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"test-model","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var want, got strings.Builder
	for i := range tokens {
		fmt.Fprintf(&want, "t%d ", i)
	}
	for line := range strings.Lines(string(body)) {
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok || !strings.Contains(data, `"type":"response.output_text.delta"`) {
			continue
		}
		var ev struct{ Delta string }
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("delta event %s: %v", data, err)
		}
		got.WriteString(ev.Delta)
		deltas++
	}
	if got.String() != want.String() || !strings.Contains(string(body), "event: response.completed") {
		t.Fatalf("the client got the text %q in %d deltas, want %q: %.300s", got.String(), deltas, want.String(), body)
	}
	return n.Load(), deltas
}

// A burst of events the engine sent at once reaches the client in a few
// writes, not one a token, on the chat relay and on the Responses stream;
// every event still arrives.
func TestStreamBurstGoesOutInFewWrites(t *testing.T) {
	const tokens = 40
	t.Run("chat", func(t *testing.T) {
		s, _, _ := newGateway(t, nil, newBackend(t, burstEngine(tokens)))
		if n := chatStreamWrites(t, s.Handler(), tokens); n > 16 {
			t.Errorf("%d writes to the client for a burst of %d tokens, want a few", n, tokens)
		}
	})
	t.Run("responses", func(t *testing.T) {
		st := newResponsesOn(t, tpresponses.Config{}, burstEngine(tokens))
		n, deltas := responsesStreamWrites(t, st.server.Handler(), tokens)
		if n > 16 {
			t.Errorf("%d writes to the client for a burst of %d tokens, want a few", n, tokens)
		}
		// The deltas sent in one write are one delta event.
		if deltas > n {
			t.Errorf("%d delta events for a burst of %d tokens in %d writes, want one a write at most", deltas, tokens, n)
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

// tickEngine streams the assistant's role, then tokens chat chunks, each
// in a write of its own a millisecond apart, as an engine decoding one
// token a step does.
func tickEngine(tokens int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(s string) {
			io.WriteString(w, "data: "+s+"\n\n")
			w.(http.Flusher).Flush()
		}
		send(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
		for i := range tokens {
			time.Sleep(time.Millisecond)
			send(fmt.Sprintf(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"t%d "}}]}`, i))
		}
		send(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		send(`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":40,"total_tokens":45}}`)
		send("[DONE]")
	}
}

// With a flush interval, a stream whose engine sends a token at a time
// reaches the client in a write for the first token and then one an
// interval, not a write a token (the interval here, the most allowed,
// is longer than the whole answer); every event still arrives. A write
// longer than the server's buffer of 4 KiB takes two system calls and a
// third for the chunk's end; without the interval, 44 writes.
func TestFlushIntervalSpacesWrites(t *testing.T) {
	const tokens = 40
	t.Run("chat", func(t *testing.T) {
		s, _, _ := newGateway(t, nil, newBackend(t, tickEngine(tokens)))
		s.opts.FlushInterval = dispatch.MaxFlushInterval
		if n := chatStreamWrites(t, s.Handler(), tokens); n > 10 {
			t.Errorf("%d writes to the client for %d tokens in an interval, want the status, the role, the first token, the rest and the end", n, tokens)
		}
	})
	t.Run("responses", func(t *testing.T) {
		st := newResponsesOn(t, tpresponses.Config{FlushInterval: dispatch.MaxFlushInterval}, tickEngine(tokens))
		n, deltas := responsesStreamWrites(t, st.server.Handler(), tokens)
		if n > 10 {
			t.Errorf("%d writes to the client for %d tokens in an interval, want the head, the first token, the rest and the end", n, tokens)
		}
		if deltas > n {
			t.Errorf("%d delta events for %d tokens in %d writes, want one a write at most", deltas, tokens, n)
		}
	})
}
