package pools

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/internal/netwake"
)

// h1Transport is the HTTP/1.1 client the gateway talks to engines with:
// plain http:// URLs, one request at a time on each kept-alive connection.
//
// net/http's Transport gives every connection a reader and a writer
// goroutine and hands each request and answer between them and the caller
// over channels; on a proxy path where the engine answers at once those
// hand-offs and their wakeups cost about as much as everything else the
// gateway does for a request (docs/benchmarks.md, "Proxy overhead").
// Here the caller's goroutine does it all: it writes the request's head and its in-memory
// body in one writev, reads the answer's head with http.ReadResponse, and
// reads the body itself, the connection going back to the idle list once
// the body has been read to its end and closed.
//
// A request is cut by its context: the connection's deadline is set in the
// past (context.AfterFunc, no goroutine), and the connection is dropped.
// A kept-alive connection the engine has closed while idle fails on its
// next use before any of the answer arrives; the request is then sent again
// once, on a new connection, when its body can be had again (GetBody). An
// idle connection is not used after idleTimeout, shorter than the engines'
// own keep-alive (uvicorn's default is 5 s).
//
// Anything else (https, a body of unknown length, a protocol upgrade) goes
// to fallback.
type h1Transport struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback    http.RoundTripper
	idleTimeout time.Duration
	maxIdle     int // per host

	mu   sync.Mutex
	idle map[string][]*h1Conn // by host:port, the most recent last

	// Counted for ConnStats.
	dials, reuses, resends atomic.Uint64
}

// h1Conn is one connection to an engine and its reader.
type h1Conn struct {
	// Conn's wakeups are held while a stream lingers (HoldWakeups).
	*netwake.Conn
	br        *bufio.Reader
	idleSince time.Time
	reused    bool
}

// h1ReadBuffer is each connection's read buffer: an SSE event or a whole
// answer of the instant kind in one read.
const h1ReadBuffer = 16 << 10

func newH1Transport(dial func(ctx context.Context, network, addr string) (net.Conn, error), fallback http.RoundTripper) *h1Transport {
	return &h1Transport{dial: dial, fallback: fallback, idleTimeout: 3 * time.Second, maxIdle: 256, idle: make(map[string][]*h1Conn)}
}

// RoundTrip implements http.RoundTripper.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || (req.Body != nil && req.Body != http.NoBody && req.ContentLength <= 0) || req.Header.Get("Upgrade") != "" {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	body := req.Body
	for attempt := 0; ; attempt++ {
		c, err := t.conn(ctx, addr)
		if err != nil {
			if body != nil {
				body.Close()
			}
			return nil, err
		}
		resp, err := t.send(ctx, c, addr, req, body)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		var stale *staleConnError
		if !errors.As(err, &stale) || attempt > 0 || req.GetBody == nil {
			return nil, err
		}
		// The engine closed the kept-alive connection while it was idle:
		// the same request on a new one.
		t.resends.Add(1)
		if body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
}

// staleConnError is a kept-alive connection that failed before any of the
// answer came: the engine closed it while it was idle.
type staleConnError struct{ err error }

func (e *staleConnError) Error() string { return e.err.Error() }
func (e *staleConnError) Unwrap() error { return e.err }

// conn is an idle connection to addr that has not been idle too long, or a
// new one.
func (t *h1Transport) conn(ctx context.Context, addr string) (*h1Conn, error) {
	// The list runs from the oldest to the most recent: when the most
	// recent has been idle too long, so have all.
	var found *h1Conn
	var expired []*h1Conn
	t.mu.Lock()
	list := t.idle[addr]
	switch n := len(list); {
	case n > 0 && time.Since(list[n-1].idleSince) < t.idleTimeout:
		found = list[n-1]
		list[n-1] = nil
		t.idle[addr] = list[:n-1]
	case n > 0:
		expired = list
		delete(t.idle, addr)
	}
	t.mu.Unlock()
	for _, e := range expired {
		e.Close()
	}
	if found != nil {
		found.reused = true
		t.reuses.Add(1)
		return found, nil
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	t.dials.Add(1)
	wc := netwake.NewConn(nc)
	return &h1Conn{Conn: wc, br: bufio.NewReaderSize(wc, h1ReadBuffer)}, nil
}

// put keeps c for the next request to addr, and closes the connections
// to addr that have been idle too long (the oldest are first), so that
// those the engine has closed do not linger.
func (t *h1Transport) put(addr string, c *h1Conn) {
	c.idleSince = time.Now()
	var expired []*h1Conn
	t.mu.Lock()
	list := t.idle[addr]
	n := 0
	for n < len(list) && c.idleSince.Sub(list[n].idleSince) >= t.idleTimeout {
		n++
	}
	if n > 0 {
		expired = append(expired, list[:n]...)
		list = append(list[:0], list[n:]...)
		clear(list[len(list):cap(list)][:n])
	}
	if len(list) < t.maxIdle {
		list, c = append(list, c), nil
	}
	t.idle[addr] = list
	t.mu.Unlock()
	if c != nil {
		expired = append(expired, c)
	}
	for _, e := range expired {
		e.Close()
	}
}

// CloseIdleConnections closes the idle connections, here and in fallback.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = make(map[string][]*h1Conn)
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.Close()
		}
	}
	if ci, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// send writes req with body on c, a connection to addr, and reads the
// answer's head.
func (t *h1Transport) send(ctx context.Context, c *h1Conn, addr string, req *http.Request, body io.ReadCloser) (*http.Response, error) {
	// A context that ends cuts the connection's reads and writes at once.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	// fail is a failure before any of the answer came: on a kept-alive
	// connection, one the engine closed while it was idle.
	fail := func(err error) (*http.Response, error) {
		stop()
		if c.reused {
			err = &staleConnError{err}
		}
		return nil, err
	}
	// The dialed connection itself, whose Buffers write in one writev.
	if err := writeRequest(c.Conn.Conn, req, body); err != nil {
		return fail(err)
	}
	if _, err := c.br.Peek(1); err != nil {
		return fail(err)
	}
	var resp *http.Response
	for {
		r, err := http.ReadResponse(c.br, req)
		if err != nil {
			stop()
			return nil, err
		}
		// 1xx answers other than a switch come before the real one.
		if r.StatusCode >= 200 || r.StatusCode == http.StatusSwitchingProtocols {
			resp = r
			break
		}
	}
	b := &h1Body{ReadCloser: resp.Body, t: t, c: c, addr: addr, keep: !resp.Close, stop: stop, ctx: ctx}
	b.done.Store(resp.Body == http.NoBody)
	resp.Body = b
	return resp, nil
}

// writeRequest writes req's head and body to conn: a body held in memory
// (an io.WriterTo: bytes.Reader, strings.Reader) in one writev with the
// head, and never more of it than req.ContentLength says, so that no byte
// of it can be read as another request.
func writeRequest(conn net.Conn, req *http.Request, body io.ReadCloser) error {
	w := &headFirst{conn: conn, head: appendRequestHead(make([]byte, 0, 512), req)}
	if body != nil && body != http.NoBody {
		n, err := io.Copy(&cappedWriter{w: w, left: req.ContentLength}, body)
		body.Close()
		if err != nil {
			return err
		}
		if n != req.ContentLength {
			return fmt.Errorf("pools: request body of %d bytes, want its Content-Length %d", n, req.ContentLength)
		}
	}
	if w.head == nil {
		return nil
	}
	_, err := conn.Write(w.head)
	return err
}

// errPastLimit is a body longer than its request's Content-Length: the
// Content-Length's bytes are written and the request fails with it.
var errPastLimit = errors.New("pools: request body longer than its length")

// cappedWriter writes at most left bytes to w.
type cappedWriter struct {
	w    io.Writer
	left int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	var err error
	if int64(len(p)) > c.left {
		p, err = p[:max(c.left, 0)], errPastLimit
	}
	n, werr := c.w.Write(p)
	c.left -= int64(n)
	if werr != nil {
		return n, werr
	}
	return n, err
}

// appendRequestHead appends req's request line and headers, Host and
// Content-Length first. A header value's CR and LF become spaces, as
// net/http writes them, so no value can end the head early.
func appendRequestHead(b []byte, req *http.Request) []byte {
	b = append(b, req.Method...)
	b = append(b, ' ')
	b = append(b, req.URL.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	b = appendHeaderValue(b, host)
	b = append(b, "\r\n"...)
	if req.ContentLength > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, max(req.ContentLength, 0), 10)
		b = append(b, "\r\n"...)
	}
	for k, vs := range req.Header {
		if k == "Host" || k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			b = appendHeaderValue(b, k)
			b = append(b, ": "...)
			b = appendHeaderValue(b, v)
			b = append(b, "\r\n"...)
		}
	}
	return append(b, "\r\n"...)
}

func appendHeaderValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\r', '\n':
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return b
}

// headFirst writes head, then what it is given, the first time in one
// writev with head.
type headFirst struct {
	conn net.Conn
	head []byte
}

func (w *headFirst) Write(p []byte) (int, error) {
	if w.head == nil {
		return w.conn.Write(p)
	}
	n := len(w.head)
	bufs := net.Buffers{w.head, p}
	m, err := bufs.WriteTo(w.conn)
	w.head = nil
	if m < int64(n) {
		if err == nil {
			err = io.ErrShortWrite
		}
		return 0, err
	}
	return int(m) - n, err
}

// h1Body is an answer's body. Read to its end and closed, it gives its
// connection back for the next request; closed before, or cut by its
// context, it closes the connection.
type h1Body struct {
	io.ReadCloser
	t    *h1Transport
	c    *h1Conn
	addr string
	keep bool // the answer did not ask to close the connection
	stop func() bool
	ctx  context.Context
	// done: Read returned io.EOF. Close may run beside a Read.
	done atomic.Bool
	once sync.Once
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.done.Store(true)
	case err != nil && b.ctx.Err() != nil:
		err = fmt.Errorf("%w (%w)", context.Cause(b.ctx), err)
	}
	return n, err
}

func (b *h1Body) Close() error {
	var err error
	b.once.Do(func() {
		// stop is false when the context already cut the connection.
		if b.stop() && b.done.Load() && b.keep {
			err = b.ReadCloser.Close()
			if b.c.br.Buffered() == 0 {
				b.t.put(b.addr, b.c)
				return
			}
		}
		// The connection first: an unread body's Close would read it to
		// its end.
		b.c.Close()
		b.ReadCloser.Close()
	})
	return err
}
