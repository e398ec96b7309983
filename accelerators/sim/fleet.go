package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fleet is a set of engines, each serving HTTP on its own loopback (or
// host) listener: the embedded demo pool and the benchmark backend. Kill
// and Restart crash and restart one replica on its address, for chaos
// runs; the other methods may be called while they do.
type Fleet struct {
	// Engines and URLs are parallel: URLs[i] is the base URL of Engines[i]
	// ("http://host:port", no trailing slash). Restart replaces
	// Engines[i]: read it through Engine while replicas may restart.
	Engines []*Engine
	URLs    []string

	// configs[i] is what engine i was started with, its KV event address
	// the one it bound, so that a restart binds the same.
	configs []Config
	ctx     context.Context

	mu struct {
		sync.Mutex
		// protects the fields below and Engines once serving
		servers []*http.Server // nil while the replica is down
		closed  bool
	}
	closeOnce sync.Once
	stop      context.CancelFunc
}

// StartFleet starts n engines configured like cfg on host, engine i on
// port basePort+i, or on ephemeral ports when basePort is 0. Engine i is
// named cfg.Name-i and seeded cfg.Seed+i; with cfg.KVSharedBlocks and no
// cfg.SharedKV, the engines share one new store of that size; when cfg.KVEventsAddr is a tcp
// address with a non-zero port, engine i publishes on that port + i. The
// fleet closes when ctx is done or Close is called.
func StartFleet(ctx context.Context, n int, cfg Config, host string, basePort int) (*Fleet, error) {
	return StartFleetFrom(ctx, 0, n, cfg, host, basePort)
}

// StartFleetFrom is StartFleet for engines first to first+n-1 of a fleet
// whose engines run in more than one process: engine i of this part is
// named and seeded as engine first+i of the whole, so that the parts
// together are the fleet StartFleet would start in one. Ports (basePort,
// KV events) count from the part's own first engine.
func StartFleetFrom(ctx context.Context, first, n int, cfg Config, host string, basePort int) (*Fleet, error) {
	if n < 1 || first < 0 {
		return nil, fmt.Errorf("sim: fleet of %d engines from engine %d", n, first)
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.KVSharedBlocks > 0 && cfg.SharedKV == nil {
		cfg.SharedKV = NewSharedKV(cfg.KVSharedBlocks, cfg.BlockSize, cfg.KVSharedBandwidth)
	}
	ctx, stop := context.WithCancel(ctx)
	f := &Fleet{ctx: ctx, stop: stop}
	for i := range n {
		c := cfg
		c.Name = fmt.Sprintf("%s-%d", cfg.Name, first+i)
		c.Seed = cfg.Seed + uint64(first+i)
		if cfg.KVEventsAddr != "" {
			addr, err := offsetPort(cfg.KVEventsAddr, i)
			if err != nil {
				f.Close()
				return nil, err
			}
			c.KVEventsAddr = addr
		}
		if err := f.start(ctx, c, host, basePort, i); err != nil {
			f.Close()
			return nil, err
		}
	}
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	return f, nil
}

func (f *Fleet) start(ctx context.Context, c Config, host string, basePort, i int) error {
	port := 0
	if basePort != 0 {
		port = basePort + i
	}
	e, srv, addr, err := serve(ctx, c, net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	c.KVEventsAddr = e.KVEventsAddr()
	f.Engines = append(f.Engines, e)
	f.URLs = append(f.URLs, "http://"+addr)
	f.configs = append(f.configs, c)
	f.mu.servers = append(f.mu.servers, srv)
	return nil
}

// serve starts an engine configured by c and serves it on addr.
func serve(ctx context.Context, c Config, addr string) (*Engine, *http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, "", fmt.Errorf("sim: engine %s: %w", c.Name, err)
	}
	e, err := New(c)
	if err != nil {
		ln.Close()
		return nil, nil, "", err
	}
	srv := &http.Server{
		Handler:           e.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go srv.Serve(ln)
	return e, srv, ln.Addr().String(), nil
}

// Engine returns engine i: the one serving now, or the last one to serve
// while the replica is down.
func (f *Fleet) Engine(i int) *Engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Engines[i]
}

// Kill crashes replica i as a killed process would go: its listener and
// every connection close at once, streams in flight are cut mid-answer,
// and connections are refused until Restart. Its engine is closed and its
// KV cache lost.
func (f *Fleet) Kill(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(i); err != nil {
		return err
	}
	srv := f.mu.servers[i]
	if srv == nil {
		return fmt.Errorf("sim: engine %s is already down", f.configs[i].Name)
	}
	f.mu.servers[i] = nil
	// Close, not Shutdown: a crash waits for nothing.
	return errors.Join(srv.Close(), f.Engines[i].Close())
}

// Restart starts a fresh engine for replica i, killed before, on the same
// address and KV event address: a restarted process, with an empty KV
// cache and counters from zero.
func (f *Fleet) Restart(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkLocked(i); err != nil {
		return err
	}
	if f.mu.servers[i] != nil {
		return fmt.Errorf("sim: engine %s is running", f.configs[i].Name)
	}
	e, srv, _, err := serve(f.ctx, f.configs[i], strings.TrimPrefix(f.URLs[i], "http://"))
	if err != nil {
		return err
	}
	f.Engines[i], f.mu.servers[i] = e, srv
	return nil
}

func (f *Fleet) checkLocked(i int) error {
	if f.mu.closed {
		return errors.New("sim: fleet closed")
	}
	if i < 0 || i >= len(f.URLs) {
		return fmt.Errorf("sim: no engine %d in a fleet of %d", i, len(f.URLs))
	}
	return nil
}

// ResetPrefixCaches empties every running engine's prefix cache (blocks
// in use by running requests stay), so that a benchmark can compare
// routing policies from cold caches on the same fleet.
func (f *Fleet) ResetPrefixCaches(ctx context.Context) error {
	f.mu.Lock()
	var running []*Engine
	for i, srv := range f.mu.servers {
		if srv != nil {
			running = append(running, f.Engines[i])
		}
	}
	f.mu.Unlock()
	var errs []error
	for _, e := range running {
		errs = append(errs, e.ResetPrefixCache(ctx))
	}
	return errors.Join(errs...)
}

// Close stops every server and engine. In-flight requests are cut.
func (f *Fleet) Close() error {
	var errs []error
	f.closeOnce.Do(func() {
		f.stop()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.mu.closed = true
		for _, s := range f.mu.servers {
			if s != nil {
				errs = append(errs, s.Close())
			}
		}
		for _, e := range f.Engines {
			errs = append(errs, e.Close())
		}
	})
	return errors.Join(errs...)
}

// offsetPort adds i to the port of a "tcp://host:port" endpoint; port 0
// stays 0 (each engine binds its own free port).
func offsetPort(endpoint string, i int) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "tcp" {
		return "", fmt.Errorf("sim: kv events address %q is not tcp://host:port", endpoint)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return "", fmt.Errorf("sim: kv events address %q has no port", endpoint)
	}
	if port != 0 {
		port += i
	}
	return "tcp://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(port)), nil
}
