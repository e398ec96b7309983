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

func TestWholeBodyConnWritesABodyOnce(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 170<<10/16)
	for _, tc := range []struct {
		name       string
		r          func() io.Reader
		want       []byte
		wantWrites int // 0: any
	}{
		{"a body as net/http sends it", func() io.Reader { return io.LimitReader(bytes.NewReader(body), int64(len(body))) }, body, 1},
		{"a body behind a NopCloser", func() io.Reader { return io.LimitReader(io.NopCloser(bytes.NewReader(body)), int64(len(body))) }, body, 1},
		{"a string", func() io.Reader { return io.LimitReader(strings.NewReader(string(body)), int64(len(body))) }, body, 1},
		{"a reader of unknown length", func() io.Reader { return io.LimitReader(struct{ io.Reader }{bytes.NewReader(body)}, int64(len(body))) }, body, 0},
		{"no limit", func() io.Reader { return bytes.NewReader(body) }, body, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &writeCounter{}
			n, err := wholeBodyConn{w}.ReadFrom(tc.r())
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(tc.want)) || !bytes.Equal(w.buf.Bytes(), tc.want) {
				t.Fatalf("wrote %d bytes (%d returned), want the %d of the body", w.buf.Len(), n, len(tc.want))
			}
			if tc.wantWrites > 0 && w.writes != tc.wantWrites {
				t.Errorf("%d writes, want %d", w.writes, tc.wantWrites)
			}
		})
	}
}

func TestWholeBodyConnKeepsTheLimit(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 5000)
	w := &writeCounter{}
	r := bytes.NewReader(body)
	lr := &io.LimitedReader{R: r, N: 1000}
	n, err := wholeBodyConn{w}.ReadFrom(lr)
	if n != 1000 || w.buf.Len() != 1000 || lr.N != 0 {
		t.Fatalf("wrote %d (returned %d, limit left %d), want exactly the limit", w.buf.Len(), n, lr.N)
	}
	if err == nil {
		t.Error("a body past its limit was written without an error")
	}
	if r.Len() != 4000 {
		t.Errorf("%d bytes left in the body, want the 4000 past the limit", r.Len())
	}
	// A negative limit writes nothing.
	w = &writeCounter{}
	if n, err := (wholeBodyConn{w}).ReadFrom(&io.LimitedReader{R: bytes.NewReader(body), N: -2}); n != 0 || err == nil || w.buf.Len() != 0 {
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

// Through net/http's transport, as the engines are sent to: the request's
// head and the body's first bytes in one write, the rest in one more.
func TestTransportSendsABodyInTwoWrites(t *testing.T) {
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
	tr := &http.Transport{DialContext: dialWholeBody(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		return countingConn{c, &writes}, err
	})}
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
