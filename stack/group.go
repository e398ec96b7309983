package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"

	"github.com/turnpike-gateway/turnpike/state"
)

// Group is several gateways on one state store behind a round-robin
// front, as a Kubernetes Service spreads requests over a gateway's
// replicas: what the benchmarks run active-active. The first gateway
// starts the simulated fleet when Options.Fleet asks for one; the others
// serve its pools.
type Group struct {
	n    int
	cfg  Config
	opts Options

	// Set by Start.
	stacks []*Stack
	front  *http.Server
	addr   string
}

// NewGroup checks cfg for a group of n gateways; nothing starts until
// Start. Their state must be where every one of them reaches it (Redis).
func NewGroup(n int, cfg *Config, opts Options) (*Group, error) {
	if n < 1 {
		return nil, fmt.Errorf("stack: a group of %d gateways", n)
	}
	if cfg.State.Backend != state.BackendRedis {
		return nil, errors.New("stack: the gateways of a group share their state in Redis")
	}
	return &Group{n: n, cfg: *cfg, opts: opts}, nil
}

// Start starts the gateways in turn, then the front. On an error, what
// had started is closed.
func (g *Group) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			g.Close(context.Background())
		}
	}()
	var backends []*url.URL
	for i := range g.n {
		c, opts := g.cfg, g.opts
		if i > 0 {
			// The others serve the pools of the first one's fleet.
			c.Pools, opts.Fleet = g.stacks[0].Pools(), nil
		}
		st, err := New(&c, opts)
		if err == nil {
			err = st.Start(ctx)
		}
		if err != nil {
			return fmt.Errorf("gateway %d: %w", i+1, err)
		}
		g.stacks = append(g.stacks, st)
		backends = append(backends, &url.URL{Scheme: "http", Host: st.Addr()})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	g.addr = ln.Addr().String()
	g.front = &http.Server{Handler: RoundRobin(backends)}
	go g.front.Serve(ln)
	return nil
}

// Addr is the front's address, once started.
func (g *Group) Addr() string { return g.addr }

// First is the first gateway, whose fleet the group serves, once started.
func (g *Group) First() *Stack { return g.stacks[0] }

// Close stops the front, then the gateways, last started first.
func (g *Group) Close(ctx context.Context) error {
	var errs []error
	if g.front != nil {
		errs = append(errs, g.front.Close())
		g.front = nil
	}
	for i := len(g.stacks) - 1; i >= 0; i-- {
		errs = append(errs, g.stacks[i].Close(ctx))
	}
	g.stacks = nil
	return errors.Join(errs...)
}

// RoundRobin is Go's standard reverse proxy sending each request to the
// next of backends in turn, streams flushed as they come: the front of a
// Group, and what turnpike's overhead is measured against.
func RoundRobin(backends []*url.URL) http.Handler {
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backends[(next.Add(1)-1)%uint64(len(backends))])
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1,
	}
	// Enough idle connections per gateway for the bench's concurrency.
	proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 256, ForceAttemptHTTP2: false}
	// Full duplex: the proxy forwards the request body while the answer
	// streams back. Without it the server discards and closes whatever
	// of the body the proxy has not yet read once the answer's headers
	// are flushed, and the proxy's copy of that request fails.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		proxy.ServeHTTP(w, r)
	})
}

var _ component = (*Group)(nil)
