package restart

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of the front.
const (
	// DefaultReadyInterval is how often the front reads each gateway's
	// /readyz: a Kubernetes readiness probe's period, shortened.
	DefaultReadyInterval = 100 * time.Millisecond
	// frontAttempts bounds the gateways one request is offered to.
	frontAttempts = 8
	// frontRetryPause spaces two rounds over every gateway, when all
	// refused.
	frontRetryPause = 50 * time.Millisecond
)

// hopHeaders are the headers of one connection, not passed on.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// Front is the bench's load balancer in front of the gateways, as a
// Kubernetes Service is: round-robin over the gateways whose /readyz
// answers 200, read every ReadyInterval (all of them while none does). A
// request that meets a refused connection, or a kept connection that the
// gateway closed before it read the request (it had gone idle as the
// gateway stopped), is sent to the next gateway; so is a non-streamed
// request whose answer did not come back, which the front gives an
// Idempotency-Key when it has none, so that it is answered once. A stream
// cut after its answer began is cut for the client too. Streams are
// flushed as they come.
type Front struct {
	// ReadyInterval is how often /readyz is read. Default
	// DefaultReadyInterval.
	ReadyInterval time.Duration

	addrs []string
	ready []atomic.Bool
	next  atomic.Uint64
	tr    *http.Transport
	// retries counts the requests sent to another gateway after one
	// failed them.
	retries atomic.Int64

	srv  *http.Server
	addr string
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// NewFront is a front over the gateways at addrs (host:port); each keeps
// its address across restarts.
func NewFront(addrs []string) *Front {
	f := &Front{addrs: addrs, ready: make([]atomic.Bool, len(addrs))}
	f.tr = &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true, ForceAttemptHTTP2: false,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	return f
}

// Start reads every gateway's readiness once, then listens on a loopback
// port and serves until Close, reading readiness every ReadyInterval.
func (f *Front) Start(ctx context.Context) error {
	if f.ReadyInterval <= 0 {
		f.ReadyInterval = DefaultReadyInterval
	}
	f.probe(ctx)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	f.addr = ln.Addr().String()
	f.srv = &http.Server{Handler: f}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	f.stop = stop
	f.wg.Add(2)
	go func() { defer f.wg.Done(); f.srv.Serve(ln) }()
	go func() {
		defer f.wg.Done()
		t := time.NewTicker(f.ReadyInterval)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
				f.probe(pctx)
			}
		}
	}()
	return nil
}

// Addr is the front's address, once started.
func (f *Front) Addr() string { return f.addr }

// Retries is the number of requests sent to another gateway after one
// failed them.
func (f *Front) Retries() int64 { return f.retries.Load() }

// Close stops serving and reading readiness, and joins both.
func (f *Front) Close() error {
	if f.srv == nil {
		return nil
	}
	f.stop()
	err := f.srv.Close()
	f.wg.Wait()
	f.tr.CloseIdleConnections()
	return err
}

// probe reads every gateway's /readyz at once.
func (f *Front) probe(ctx context.Context) {
	var wg sync.WaitGroup
	for i, a := range f.addrs {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+a+"/readyz", nil)
			resp, err := f.tr.RoundTrip(req)
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			f.ready[i].Store(ok)
		})
	}
	wg.Wait()
}

// pick is the next gateway in turn among the ready ones, or among all
// when none is ready.
func (f *Front) pick() string {
	n := uint64(len(f.addrs))
	start := f.next.Add(1) - 1
	for k := range n {
		i := (start + k) % n
		if f.ready[i].Load() {
			return f.addrs[i]
		}
	}
	return f.addrs[start%n]
}

func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := r.Header.Clone()
	for _, k := range hopHeaders {
		h.Del(k)
	}
	stream := streamed(body)
	if r.Method == http.MethodPost && !stream && h.Get("Idempotency-Key") == "" {
		h.Set("Idempotency-Key", "front-"+rand.Text())
	}
	resp, err := f.send(r.Context(), r.Method, r.URL.RequestURI(), h, body, stream)
	if err != nil {
		http.Error(w, "front: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, k := range hopHeaders {
		resp.Header.Del(k)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	flush := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			flush.Flush()
		}
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			// The answer began: the client must see it cut.
			panic(http.ErrAbortHandler)
		}
	}
}

// send offers the request to the gateways in turn until one answers, or
// it fails in a way that is not safe to send again.
func (f *Front) send(ctx context.Context, method, uri string, h http.Header, body []byte, stream bool) (*http.Response, error) {
	var last error
	for attempt := range frontAttempts {
		if attempt > 0 {
			f.retries.Add(1)
			if attempt%len(f.addrs) == 0 {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(frontRetryPause):
				}
			}
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://"+f.pick()+uri, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header = h.Clone()
		resp, err := f.tr.RoundTrip(req)
		if err == nil {
			return resp, nil
		}
		last = err
		if ctx.Err() != nil || !retryable(err, stream) {
			return nil, err
		}
	}
	return nil, last
}

// retryable reports whether a request that failed with err, without an
// answer, may be sent to another gateway: always when the connection was
// refused, or the kept connection was closed before the gateway read the
// request (a gateway closes only idle ones); a non-streamed request, which
// carries an Idempotency-Key, whatever the error.
func retryable(err error, stream bool) bool {
	if !stream {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	msg := err.Error()
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(msg, "server closed idle connection") || strings.Contains(msg, "connection reset")
}

// streamed reports whether a JSON body asks for a stream.
func streamed(body []byte) bool {
	var b struct {
		Stream bool `json:"stream"`
	}
	return json.Unmarshal(body, &b) == nil && b.Stream
}

var _ http.Handler = (*Front)(nil)
