package pools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Errors returned by Client.Send, by class.
var (
	// ErrBreakerOpen means the endpoint's breaker refused the request
	// without sending it.
	ErrBreakerOpen = errors.New("pools: endpoint breaker open")
	// ErrUpstream wraps a failure of the engine: a connection error, a
	// timeout before the response headers, or a 5xx.
	ErrUpstream = errors.New("pools: upstream failure")
)

// UpstreamError is a 5xx answer from an engine. Its body is kept (bounded)
// so the caller can relay the engine's own message when no retry helps.
type UpstreamError struct {
	Endpoint   string
	StatusCode int
	Body       []byte
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("pools: %s answered %d", e.Endpoint, e.StatusCode)
}

func (e *UpstreamError) Unwrap() error { return ErrUpstream }

// Client sends requests to engines through each endpoint's breaker and
// keeps the endpoint's in-flight counts.
type Client struct {
	http *http.Client
	// timeout bounds a whole request, its streamed body included.
	timeout time.Duration
}

func newClient(opts Options) *Client {
	dial := (&net.Dialer{Timeout: opts.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	// What h1Transport does not take (https engines, a body of unknown
	// length) goes through net/http's.
	fallback := &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: opts.RequestTimeout,
		// Engines speak plain HTTP/1.1 with SSE; compression would only
		// delay the first token.
		DisableCompression: true,
	}
	return &Client{http: &http.Client{Transport: newH1Transport(dial, fallback)}, timeout: opts.RequestTimeout}
}

// Send POSTs body to path on ep and returns the engine's response once its
// headers arrive. tokens is the request's estimated token cost, held in the
// endpoint's in-flight count until the body is closed.
//
// The caller owns the response and must close its body. A 4xx comes back as
// a normal response (it is the client's fault and never trips the breaker);
// a 5xx comes back as *UpstreamError with the body consumed and closed.
func (c *Client) Send(ctx context.Context, ep *Endpoint, path string, body []byte, header http.Header, tokens int64) (*http.Response, error) {
	// The deadline covers the stream too: an engine that stops sending
	// mid-answer must not hold the request, its ticket and its in-flight
	// count forever. The body's Close cancels it.
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	if p := ep.Pool; p != nil && p.Config.Lendable {
		// Lent work is cut when a reclaim's deadline passes.
		var release func()
		ctx, release = p.track(ctx)
		timeout := cancel
		cancel = func() { release(); timeout() }
	}
	var resp *http.Response
	// A request admitted while half-open is a trial, counted until the
	// breaker has its verdict, so that routing stops choosing the endpoint
	// once it has as many as the breaker lets through (Endpoint.WantsTrial).
	trial := false
	defer func() {
		if trial {
			ep.trials.Add(-1)
		}
	}()
	_, err := ep.breaker.Execute(func() (struct{}, error) {
		if ep.breaker.State() == gobreaker.StateHalfOpen {
			trial = true
			ep.trials.Add(1)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL.JoinPath(path).String(), bytes.NewReader(body))
		if err != nil {
			return struct{}{}, err
		}
		for k, vs := range header {
			req.Header[k] = vs
		}
		req.Header.Set("Content-Type", "application/json")
		ep.inFlight.Add(1)
		ep.inFlightTokens.Add(tokens)
		resp, err = c.http.Do(req)
		if err != nil {
			ep.inFlight.Add(-1)
			ep.inFlightTokens.Add(-tokens)
			if errors.Is(context.Cause(ctx), ErrReclaimed) {
				return struct{}{}, fmt.Errorf("%w: %s: %w", ErrUpstream, ep.ID, ErrReclaimed)
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				// The client went away: not the engine's fault, and the
				// breaker excludes it (see NewRegistry).
				return struct{}{}, ctx.Err()
			}
			return struct{}{}, fmt.Errorf("%w: %s: %w", ErrUpstream, ep.ID, err)
		}
		resp.Body = &trackedBody{ReadCloser: resp.Body, ep: ep, tokens: tokens, cancel: cancel, ctx: ctx}
		if resp.StatusCode >= 500 {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			return struct{}{}, &UpstreamError{Endpoint: ep.ID, StatusCode: resp.StatusCode, Body: b}
		}
		return struct{}{}, nil
	})
	switch {
	case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
		cancel()
		return nil, fmt.Errorf("%w: %s", ErrBreakerOpen, ep.ID)
	case err != nil:
		cancel()
		return nil, err
	}
	return resp, nil
}

// batchBytes is the receive low-water mark of a connection whose
// wakeups are held: as much as a stream's reader takes in one read
// (dispatch reads 32 KiB).
const batchBytes = 32 << 10

// HoldWakeups, given an answer's body from an engine (Client.Send), stops
// the kernel waking the gateway each time a piece of the answer arrives,
// until a read of the body finds nothing to read. A streamed answer comes
// a token at a time, each token a write of the engine's and a readiness
// event for the gateway's poller, whether or not a reader waits; a reader
// that means to read only later anyway (a stream written to its client
// once a flush interval) holds the wakeups meanwhile, and the poller hears
// of the answer once batchBytes have come or the connection ends
// (netwake.Conn). Reads take what has come without waiting while there is
// some, so a stream read once an interval stays held; the first that
// finds nothing releases the connection and waits as usual. It does
// nothing for bodies not of an engine connection of this package's own
// transport.
func HoldWakeups(body io.Reader) {
	if tb, ok := body.(*trackedBody); ok {
		body = tb.ReadCloser
	}
	if b, ok := body.(*h1Body); ok {
		b.c.Hold(batchBytes)
	}
}

// trackedBody releases the endpoint's in-flight counts exactly once, when
// the caller closes the body.
type trackedBody struct {
	io.ReadCloser
	ep     *Endpoint
	tokens int64
	cancel context.CancelFunc
	once   sync.Once
	// began is set, once, by the first read that returns bytes or by
	// Close, which may run beside a read.
	began atomic.Bool
	// ctx is the request's context, read only when a read fails, to
	// name a reclaim as the cause.
	ctx context.Context
}

// Read reads the engine's body; a read cut by a reclaim's deadline says so.
func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.began.Load() && b.began.CompareAndSwap(false, true) {
		b.ep.answered.Add(1)
	}
	if err != nil && err != io.EOF && errors.Is(context.Cause(b.ctx), ErrReclaimed) {
		err = fmt.Errorf("%w (%w)", ErrReclaimed, err)
	}
	return n, err
}

func (b *trackedBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		// An end frees the request's sequence and KV blocks (and, if it
		// never answered, its prefill): the engine may start another.
		n := int64(1)
		if b.began.CompareAndSwap(false, true) {
			n = 2
		}
		b.ep.answered.Add(n)
		b.ep.inFlight.Add(-1)
		b.ep.inFlightTokens.Add(-b.tokens)
		b.cancel()
	})
	return err
}

// ConnStats counts the connections the client's requests to plain-http
// engines went out on.
type ConnStats struct {
	// New is connections opened; Reused, requests sent on a kept-alive
	// one; Resent, requests sent again on a new connection after a
	// kept-alive one turned out closed by its engine.
	New, Reused, Resent uint64
}

// ConnStats reports the client's connection counts.
func (c *Client) ConnStats() ConnStats {
	t, ok := c.http.Transport.(*h1Transport)
	if !ok {
		return ConnStats{}
	}
	return ConnStats{New: t.dials.Load(), Reused: t.reuses.Load(), Resent: t.resends.Load()}
}

// Get performs a GET on ep outside the breaker (models listing, tokenize).
func (c *Client) Get(ctx context.Context, ep *Endpoint, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL.JoinPath(path).String(), nil)
	if err != nil {
		return nil, err
	}
	return c.http.Do(req)
}
