package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/stack"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// benchGateways are bench's options for active-active runs: how many
// gateways share the embedded fleet, and the Redis they share.
type benchGateways struct {
	// count is --gateways: the gateways of an entry that names none.
	count int
	// redisURL is --redis-url; empty: each run starts a redis-server of
	// its own on a private loopback port.
	redisURL string
}

func (g *benchGateways) register(fs interface {
	IntVar(*int, string, int, string)
	StringVar(*string, string, string, string)
}) {
	fs.IntVar(&g.count, "gateways", 1, "embedded: gateways on the one simulated fleet, behind a round-robin proxy, sharing state in Redis (more than 1 needs redis-server, or --redis-url); a --compare entry may name its own with a suffix: cache-aware@1gw,cache-aware@2gw (a @Ngw entry runs on Redis even with 1)")
	fs.StringVar(&g.redisURL, "redis-url", "", "embedded with several gateways: the Redis they share (each run under a key prefix of its own); empty: start a redis-server on a private loopback port for each run")
}

// gatewaysOf strips an entry's @Ngw suffix: the entry left, the gateways
// it names (def when none) and whether it named them.
func gatewaysOf(entry string, def int) (rest string, n int, named bool, err error) {
	i := strings.LastIndexByte(entry, '@')
	suffix := entry[i+1:]
	count, ok := strings.CutSuffix(suffix, "gw")
	if !ok {
		return entry, def, false, nil
	}
	n, err = strconv.Atoi(count)
	if err != nil || n < 1 {
		return "", 0, false, fmt.Errorf("bench: entry %q: %q is not a gateway count such as 2gw", entry, suffix)
	}
	if i < 0 {
		return "", n, true, nil
	}
	return entry[:i], n, true, nil
}

// startBenchGateways starts n gateways, the first with the fleet fl,
// all on one Redis, behind a round-robin proxy: the Target bench runs
// against.
func startBenchGateways(ctx context.Context, n int, g *benchGateways, cfg *stack.Config, sf *simFlags, fl *sim.Topology, log *slog.Logger) (bench.Target, func() error, error) {
	var stops []func() error
	stopAll := func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		stops = nil
		return errors.Join(errs...)
	}
	fail := func(err error) (bench.Target, func() error, error) {
		stopAll()
		return bench.Target{}, nil, err
	}
	redisURL := g.redisURL
	cfg.State = state.Config{Backend: state.BackendRedis, URL: redisURL, KeyPrefix: "turnpike-bench-" + rand.Text() + ":"}
	if redisURL == "" {
		dir, err := os.MkdirTemp("", "turnpike-bench-redis-")
		if err != nil {
			return fail(err)
		}
		srv, err := redistest.Launch(dir)
		if err != nil {
			os.RemoveAll(dir)
			if errors.Is(err, redistest.ErrNotInstalled) {
				return fail(fmt.Errorf("bench: gateways share state in Redis: %s, or pass --redis-url", redistest.SkipMessage))
			}
			return fail(fmt.Errorf("bench: starting redis-server: %w", err))
		}
		stops = append(stops, func() error { srv.Stop(); return os.RemoveAll(dir) })
		cfg.State.URL = srv.URL()
	}
	var backends []*url.URL
	var first *stack.Stack
	firstFleet := fl
	for i := range n {
		c := *cfg
		if i > 0 {
			// The others serve the pools of the first one's fleet.
			c.Pools = first.Pools()
			fl = nil
		}
		st, err := stack.New(&c, stack.Options{Logger: log, Fleet: fl})
		if err == nil {
			err = st.Start(ctx)
		}
		if err != nil {
			return fail(fmt.Errorf("bench: gateway %d: %w", i+1, err))
		}
		stops = append(stops, func() error { return st.Close(context.Background()) })
		if i == 0 {
			first = st
		}
		backends = append(backends, &url.URL{Scheme: "http", Host: st.Addr()})
	}
	front, err := startRoundRobin(backends)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, front.Close)
	t := benchTarget(first, sf, firstFleet)
	t.BaseURL = "http://" + front.Addr
	return t, stopAll, nil
}

// roundRobin is the front of several gateways: each request to the next
// one in turn, as a Kubernetes Service or a plain load balancer does,
// streams flushed as they come.
type roundRobin struct {
	Addr string
	srv  *http.Server
}

func startRoundRobin(backends []*url.URL) (*roundRobin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rr := &roundRobin{Addr: ln.Addr().String(), srv: &http.Server{Handler: roundRobinHandler(backends)}}
	go rr.srv.Serve(ln)
	return rr, nil
}

// roundRobinHandler is Go's standard reverse proxy sending each request to
// the next of backends in turn, streams flushed as they come.
func roundRobinHandler(backends []*url.URL) http.Handler {
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

// Close stops the front; the gateways behind it stay.
func (rr *roundRobin) Close() error { return rr.srv.Close() }

// benchTarget is what bench runs against on a stack with an embedded
// fleet: its gateway, its engines' metrics and their KV capacity.
func benchTarget(st *stack.Stack, sf *simFlags, fl *sim.Topology) bench.Target {
	f := st.Fleet()
	t := bench.Target{BaseURL: "http://" + st.Addr(), Replicas: f, EngineURLs: f.URLs(), Cost: benchCost(st.Pools(), sf.timeScale, sf.ttftTarget)}
	if tok, ok := fl.Config.Tokenizer.(stack.SimTokenizer); ok {
		t.SystemTokens = tok.SystemTokens
	}
	for _, u := range f.URLs() {
		t.EngineMetricsURLs = append(t.EngineMetricsURLs, u+"/metrics")
	}
	t.KVCapacityTokens = f.KVCapacityTokens()
	return t
}
