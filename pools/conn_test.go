package pools

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// writeCounter is a net.Conn that keeps what is written and counts the
// writes.
type writeCounter struct {
	net.Conn
	buf    bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.buf.Write(p)
}

// postOf is a request of body's length whose body is r.
func postOf(t *testing.T, r io.Reader, length int) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://engine:8000/v1/chat/completions", r)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(length)
	return req
}

// A body held in memory goes in one write with the head (one writev on a
// real connection; here, behind a wrapper, the head's write and the
// body's); one of unknown kind is copied whole.
func TestWriteRequestWritesABodyOnce(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 170<<10/16)
	for _, tc := range []struct {
		name       string
		r          func() io.Reader
		wantWrites int // 0: any
	}{
		{"a bytes.Reader", func() io.Reader { return bytes.NewReader(body) }, 2},
		{"a body behind a NopCloser", func() io.Reader { return io.NopCloser(bytes.NewReader(body)) }, 2},
		{"a string", func() io.Reader { return strings.NewReader(string(body)) }, 2},
		{"a reader of unknown kind", func() io.Reader { return struct{ io.Reader }{bytes.NewReader(body)} }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &writeCounter{}
			req := postOf(t, tc.r(), len(body))
			if err := writeRequest(w, req, req.Body); err != nil {
				t.Fatal(err)
			}
			head := appendRequestHead(nil, req)
			if got := w.buf.Bytes(); !bytes.Equal(got[:min(len(head), len(got))], head) || !bytes.Equal(got[len(head):], body) {
				t.Fatalf("wrote %d bytes, want the %d of the head and the %d of the body", len(got), len(head), len(body))
			}
			if tc.wantWrites > 0 && w.writes != tc.wantWrites {
				t.Errorf("%d writes, want %d", w.writes, tc.wantWrites)
			}
		})
	}
}

// A body longer than its Content-Length: the Content-Length's bytes are
// written, no more, and the request fails; a shorter one fails too.
func TestWriteRequestKeepsTheContentLength(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 5000)
	w := &writeCounter{}
	r := bytes.NewReader(body)
	req := postOf(t, r, 1000)
	err := writeRequest(w, req, req.Body)
	head := appendRequestHead(nil, req)
	if w.buf.Len() != len(head)+1000 {
		t.Fatalf("wrote %d bytes of body, want exactly the 1000 of its Content-Length", w.buf.Len()-len(head))
	}
	if err == nil {
		t.Error("a body past its Content-Length was written without an error")
	}
	if r.Len() != 4000 {
		t.Errorf("%d bytes left in the body, want the 4000 past the limit", r.Len())
	}
	w = &writeCounter{}
	req = postOf(t, bytes.NewReader(body[:10]), 1000)
	if err := writeRequest(w, req, req.Body); err == nil {
		t.Error("a body short of its Content-Length was written without an error")
	}
	// A negative limit writes nothing.
	cw := &cappedWriter{w: w, left: -2}
	w.buf.Reset()
	if n, err := cw.Write(body); n != 0 || err == nil || w.buf.Len() != 0 {
		t.Errorf("a negative limit: wrote %d (returned %d, %v), want nothing and an error", w.buf.Len(), n, err)
	}
}

// countingConn counts the writes to a real connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// Through the engine client, as the engines are sent to: a 170 KB body
// reaches the engine unchanged in no more writes than the head's and the
// body's.
func TestClientSendsABodyInTwoWrites(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 170<<10/16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := io.ReadAll(r.Body)
		if !bytes.Equal(got, body) {
			http.Error(w, "body changed", http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	var writes atomic.Int64
	var d net.Dialer
	tr := newH1Transport(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		return countingConn{c, &writes}, err
	}, http.DefaultTransport)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n := writes.Load(); n > 2 {
		t.Errorf("%d writes for a %d-byte body, want 2", n, len(body))
	}
}
