package pools

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1Server is an engine that counts its connections.
func h1Server(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	return h1ServerClosing(t, h, nil)
}

// h1ServerClosing is h1Server; with closed, it closes every connection as
// soon as it is idle, as an engine whose keep-alive timeout passed does,
// and counts those it closed in closed.
func h1ServerClosing(t *testing.T, h http.HandlerFunc, closed *atomic.Int64) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		switch {
		case s == http.StateNew:
			conns.Add(1)
		case s == http.StateIdle && closed != nil:
			c.Close()
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func newTestH1() *h1Transport {
	var d net.Dialer
	return newH1Transport(d.DialContext, http.DefaultTransport)
}

func h1Post(t *testing.T, tr http.RoundTripper, ctx context.Context, url string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// h1Answer posts body and reads the whole answer.
func h1Answer(t *testing.T, tr http.RoundTripper, url string, body []byte) (int, string, error) {
	t.Helper()
	resp := h1Post(t, tr, context.Background(), url, body)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got), err
}

// An engine's answers come back whole, bodies of every size reach it
// unchanged, and one kept-alive connection carries them all.
func TestH1KeepsOneConnection(t *testing.T) {
	srv, conns := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" || int64(len(b)) != r.ContentLength {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Write(b)
	})
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	for _, n := range []int{0, 1, 4<<10 - 100, 4 << 10, 170 << 10, 2 << 20} {
		body := bytes.Repeat([]byte("x"), n)
		status, got, err := h1Answer(t, tr, srv.URL+"/v1/chat/completions", body)
		if err != nil || status != http.StatusOK || got != string(body) {
			t.Fatalf("%d-byte body: status %d, %d bytes back, %v", n, status, len(got), err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for six requests in a row, want 1", n)
	}
	if d, r := tr.dials.Load(), tr.reuses.Load(); d != 1 || r != 5 {
		t.Errorf("counted %d new and %d reused connections, want 1 and 5", d, r)
	}
}

// A kept-alive connection the engine closed while it was idle costs the
// request nothing: it goes again on a new connection.
func TestH1ResendsOnAConnectionClosedWhileIdle(t *testing.T) {
	var closed atomic.Int64
	srv, conns := h1ServerClosing(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}, &closed)
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	for i := range 3 {
		if _, got, err := h1Answer(t, tr, srv.URL+"/v1/chat/completions", []byte(`{"n":1}`)); err != nil || got != "ok" {
			t.Fatalf("request %d: %q, %v", i, got, err)
		}
		// The engine's close lands before the next request.
		waitFor(t, "the engine to close the idle connection", func() bool { return closed.Load() > int64(i) })
	}
	if n := conns.Load(); n < 3 {
		t.Errorf("%d connections, want a new one for each request", n)
	}
	if n := tr.resends.Load(); n != 2 {
		t.Errorf("counted %d requests sent again, want the 2 that found their connection closed", n)
	}
}

// A request whose context ends mid-answer stops at once with the
// context's error, and its connection is not used again.
func TestH1CancelCutsTheAnswer(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv, conns := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" {
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			<-release
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	resp := h1Post(t, tr, ctx, srv.URL+"/slow", []byte(`{}`))
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	_, err := io.ReadAll(br)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v, want context.Canceled", err)
	}
	resp.Body.Close()
	h1Answer(t, tr, srv.URL+"/fast", []byte(`{}`))
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want the cut one dropped and a new one", n)
	}
}

// An answer closed before its end, or one that asks to close, gives up
// its connection; Close does not wait for an endless stream.
func TestH1UnreadOrClosingAnswersDropTheConnection(t *testing.T) {
	srv, conns := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
			return
		}
		for r.Context().Err() == nil {
			io.WriteString(w, "data: more\n\n")
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	})
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	resp := h1Post(t, tr, context.Background(), srv.URL+"/endless", []byte(`{}`))
	resp.Body.Read(make([]byte, 4))
	resp.Body.Close()
	for range 2 {
		if _, got, _ := h1Answer(t, tr, srv.URL+"/close", []byte(`{}`)); got != "bye" {
			t.Fatalf("answer %q", got)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want one for each request", n)
	}
}

// A header value cannot end the request's head early: its CR and LF go
// as spaces, as net/http writes them.
func TestH1HeaderValuesStayInTheirHeader(t *testing.T) {
	srv, _ := h1Server(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.Header.Get("X-Request-Id")+"|"+r.Header.Get("X-Evil"))
	})
	tr := newTestH1()
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{}`))
	req.Header["X-Request-Id"] = []string{"abc\r\nX-Evil: 1"}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "abc  X-Evil: 1|" {
		t.Fatalf("engine saw %q, want the value whole in its header and no X-Evil", got)
	}
}

// https, and a body of unknown length, go through the fallback.
func TestH1FallsBackForHTTPS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	defer srv.Close()
	var d net.Dialer
	tr := newH1Transport(d.DialContext, srv.Client().Transport)
	defer tr.CloseIdleConnections()
	if _, got, _ := h1Answer(t, tr, srv.URL, []byte("secure")); got != "secure" {
		t.Fatalf("https answer %q", got)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, struct{ io.Reader }{strings.NewReader("streamed")})
	if resp, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	} else {
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != "streamed" {
			t.Fatalf("unknown-length answer %q", got)
		}
	}
}

// FuzzAppendRequestHead holds the head h1Transport writes to what an
// HTTP/1.1 server reads: the method, path and every header value as set
// (CR and LF as spaces), no header that was not set, and the body after.
func FuzzAppendRequestHead(f *testing.F) {
	f.Add("/v1/chat/completions", "X-Request-Id", "abc", "body")
	f.Add("/v1/x?a=b", "Traceparent", "00-1-2-01\r\nX-Evil: 1", "")
	f.Add("/", "X-A", "\n\n\r\r", "{}")
	f.Fuzz(func(t *testing.T, path, key, value, body string) {
		if !strings.HasPrefix(path, "/") {
			return
		}
		req, err := http.NewRequest(http.MethodPost, "http://engine:8000"+path, strings.NewReader(body))
		if err != nil || req.URL.RequestURI() != path || strings.ContainsAny(path, " \r\n") {
			return
		}
		key = http.CanonicalHeaderKey(key)
		if !httpguts.ValidHeaderFieldName(key) {
			return
		}
		switch key {
		case "Host", "Content-Length", "Connection", "Transfer-Encoding", "Expect", "Trailer", "Te", "Upgrade":
			return
		}
		req.Header[key] = []string{value}
		head := appendRequestHead(nil, req)
		got, err := http.ReadRequest(bufio.NewReader(io.MultiReader(bytes.NewReader(head), strings.NewReader(body))))
		if err != nil {
			// A value the server refuses (a control byte) is refused
			// by net/http's own client too; it must not split the head.
			if bytes.Count(head, []byte("\r\n\r\n")) != 1 {
				t.Fatalf("head %q ends early", head)
			}
			return
		}
		want := strings.TrimSpace(strings.NewReplacer("\r", " ", "\n", " ").Replace(value))
		if got.Method != http.MethodPost || got.URL.RequestURI() != path || got.Header.Get(key) != want {
			t.Fatalf("read %s %s %s=%q, want POST %s %q", got.Method, got.URL.RequestURI(), key, got.Header.Get(key), path, want)
		}
		for k := range got.Header {
			if k != key && k != "Content-Length" {
				t.Fatalf("header %q appeared (head %q)", k, head)
			}
		}
		b, _ := io.ReadAll(got.Body)
		if string(b) != body {
			t.Fatalf("body %q, want %q", b, body)
		}
	})
}
