package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Fleet is a set of engines, each serving HTTP on its own loopback (or
// host) listener: the embedded demo pool and the benchmark backend.
type Fleet struct {
	// Engines and URLs are parallel: URLs[i] is the base URL of Engines[i]
	// ("http://host:port", no trailing slash).
	Engines []*Engine
	URLs    []string

	servers   []*http.Server
	closeOnce sync.Once
	stop      context.CancelFunc
}

// StartFleet starts n engines configured like cfg on host, engine i on
// port basePort+i, or on ephemeral ports when basePort is 0. Engine i is
// named cfg.Name-i and seeded cfg.Seed+i; when cfg.KVEventsAddr is a tcp
// address with a non-zero port, engine i publishes on that port + i. The
// fleet closes when ctx is done or Close is called.
func StartFleet(ctx context.Context, n int, cfg Config, host string, basePort int) (*Fleet, error) {
	if n < 1 {
		return nil, fmt.Errorf("sim: fleet of %d engines", n)
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	f := &Fleet{stop: stop}
	for i := range n {
		c := cfg
		c.Name = fmt.Sprintf("%s-%d", cfg.Name, i)
		c.Seed = cfg.Seed + uint64(i)
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
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("sim: engine %s: %w", c.Name, err)
	}
	e, err := New(c)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{
		Handler:           e.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go srv.Serve(ln)
	f.Engines = append(f.Engines, e)
	f.URLs = append(f.URLs, "http://"+ln.Addr().String())
	f.servers = append(f.servers, srv)
	return nil
}

// ResetPrefixCaches empties every engine's prefix cache (blocks in use by
// running requests stay), so that a benchmark can compare routing
// policies from cold caches on the same fleet.
func (f *Fleet) ResetPrefixCaches(ctx context.Context) error {
	var errs []error
	for _, e := range f.Engines {
		errs = append(errs, e.ResetPrefixCache(ctx))
	}
	return errors.Join(errs...)
}

// Close stops every server and engine. In-flight requests are cut.
func (f *Fleet) Close() error {
	var errs []error
	f.closeOnce.Do(func() {
		f.stop()
		for _, s := range f.servers {
			errs = append(errs, s.Close())
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
