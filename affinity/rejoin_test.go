package affinity

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// rejoinStack is a two-endpoint fleet behind the default cache-aware
// policy, with an index and session pins, driven the way the turn path
// drives it: Pick, Send, Done.
type rejoinStack struct {
	reg    *pools.Registry
	policy Policy
}

func newRejoinStack(t *testing.T, urls []string, opts pools.Options) *rejoinStack {
	t.Helper()
	var eps []pools.EndpointConfig
	for _, u := range urls {
		eps = append(eps, pools.EndpointConfig{URL: u})
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: eps}},
		opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(context.Background()) })
	store, err := sessions.NewStore(sessions.Options{Pins: &sessions.MemPinStore{}})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := NewPolicy(Config{}, Deps{Index: kv.NewIndex(kv.IndexOptions{}), Sessions: store})
	if err != nil {
		t.Fatal(err)
	}
	return &rejoinStack{reg: reg, policy: policy}
}

// turn routes one turn of session and sends it, as the turn path does; it
// returns the endpoint that answered.
func (s *rejoinStack) turn(ctx context.Context, session string, body []byte) (*pools.Endpoint, error) {
	// Every session shares a long system prompt and adds its own block, so
	// the prefix scorer pulls each turn towards where the session ran.
	hashes := make([]kv.BlockHash, 0, 9)
	for i := range 8 {
		hashes = append(hashes, kv.BlockHash(i+1))
	}
	hashes = append(hashes, kv.BlockHash(1000+len(session)*31+int(session[len(session)-1])))
	req := &Request{Model: "m", Tenant: "t", SessionKey: session, PromptTokens: 9 * 16, ExpectedOutputTokens: 4, Hashes: hashes}
	ep, err := s.policy.Pick(ctx, req, s.reg.Endpoints())
	if err != nil {
		return nil, err
	}
	resp, err := s.reg.Client().Send(ctx, ep, "/v1/chat/completions", body, nil, 9*16+4)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	s.policy.Done(req, ep, Outcome{Err: err})
	return ep, err
}

// load runs sessions concurrently, turn after turn, until the returned
// stop is called (or the test ends).
func (s *rejoinStack) load(t *testing.T, ctx context.Context, sessions int, body []byte) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				// A failed turn is what the turn path would retry on
				// the other endpoint; the load just goes on.
				s.turn(ctx, fmt.Sprintf("s%d", i), body)
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// waitUntil polls cond until it holds, failing the test after a deadline
// far beyond what the condition needs.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRecoveredEndpointRejoins is the regression test of a replica that
// came back and never got traffic again (issue 9, D1): its breaker went
// half-open, and the breaker-closed filter kept it out as long as another
// endpoint was closed, so the trial that would close it never came. Under
// load from sessions pinned to the other replica, with their prefix cached
// there, the recovered replica must get its trial, close its breaker and
// serve again.
func TestRecoveredEndpointRejoins(t *testing.T) {
	var down atomic.Bool
	var served [2]atomic.Int64
	var urls []string
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if i == 1 && down.Load() {
				http.Error(w, "engine down", http.StatusServiceUnavailable)
				return
			}
			served[i].Add(1)
			io.WriteString(w, `{}`)
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	s := newRejoinStack(t, urls, pools.Options{BreakerFailures: 2, BreakerOpenFor: 50 * time.Millisecond})
	a, b := s.reg.Endpoints()[0], s.reg.Endpoints()[1]
	ctx := context.Background()

	down.Store(true)
	for range 2 {
		if _, err := s.reg.Client().Send(ctx, b, "/v1/chat/completions", []byte(`{}`), nil, 1); err == nil {
			t.Fatal("a failing engine answered")
		}
	}
	if st := b.BreakerState(); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after failures, want open", st)
	}
	// While b is open every session runs on a, is pinned there and has
	// its prefix recorded there.
	for i := range 8 {
		if ep, err := s.turn(ctx, fmt.Sprintf("s%d", i), []byte(`{}`)); err != nil || ep != a {
			t.Fatalf("turn while b is open: %v on %v, want a", err, ep)
		}
	}
	down.Store(false)
	before := served[1].Load()

	stop := s.load(t, ctx, 8, []byte(`{}`))
	waitUntil(t, "b's breaker to close", func() bool { return b.BreakerState() == gobreaker.StateClosed })
	waitUntil(t, "b to take traffic again", func() bool { return served[1].Load()-before >= 3 })
	stop()
	if st := a.BreakerState(); st != gobreaker.StateClosed {
		t.Errorf("a's breaker %v, want closed", st)
	}
}

// TestHalfOpenTrialIsBounded: while a half-open endpoint's trial is in
// flight, routing sends it nothing more, and the load goes on elsewhere.
func TestHalfOpenTrialIsBounded(t *testing.T) {
	var down atomic.Bool
	var served [2]atomic.Int64
	release := make(chan struct{})
	var urls []string
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if i == 1 {
				if down.Load() {
					http.Error(w, "engine down", http.StatusServiceUnavailable)
					return
				}
				served[1].Add(1)
				<-release // the trial hangs until the test lets it answer
				io.WriteString(w, `{}`)
				return
			}
			served[0].Add(1)
			io.WriteString(w, `{}`)
		}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	releaseTrial := sync.OnceFunc(func() { close(release) })
	s := newRejoinStack(t, urls, pools.Options{BreakerFailures: 1, BreakerOpenFor: 20 * time.Millisecond})
	b := s.reg.Endpoints()[1]
	ctx := context.Background()
	down.Store(true)
	if _, err := s.reg.Client().Send(ctx, b, "/v1/chat/completions", []byte(`{}`), nil, 1); err == nil {
		t.Fatal("a failing engine answered")
	}
	down.Store(false)

	stop := s.load(t, ctx, 8, []byte(`{}`))
	// Registered after the load and the servers, so it runs before both
	// are stopped: a failed test must not leave the trial hanging.
	t.Cleanup(releaseTrial)
	waitUntil(t, "the trial to reach b", func() bool { return served[1].Load() == 1 })
	onA := served[0].Load()
	waitUntil(t, "more turns on a", func() bool { return served[0].Load() >= onA+50 })
	if n := served[1].Load(); n != 1 {
		t.Errorf("b got %d requests while its trial was in flight, want 1", n)
	}
	releaseTrial()
	waitUntil(t, "b's breaker to close", func() bool { return b.BreakerState() == gobreaker.StateClosed })
	stop()
}

// TestRestartedEngineRejoins kills a real simulated engine (its listener
// closes: connection refused), then starts a fresh engine on the same
// address, as a replica restarted by its supervisor. The health checker
// and the breaker both notice; once the engine is back, turns reach it
// again.
func TestRestartedEngineRejoins(t *testing.T) {
	var hits [2]atomic.Int64
	start := func(i int, ln net.Listener) *httptest.Server {
		eng, err := sim.New(sim.Config{ServedModelName: "m", TimeScale: 0})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		h := eng.Handler()
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/chat/completions" {
				hits[i].Add(1)
			}
			h.ServeHTTP(w, r)
		}))
		if ln != nil {
			srv.Listener.Close()
			srv.Listener = ln
		}
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := start(0, nil), start(1, nil)
	s := newRejoinStack(t, []string{a.URL, b.URL}, pools.Options{
		BreakerFailures: 2, BreakerOpenFor: 100 * time.Millisecond,
		HealthInterval: 20 * time.Millisecond, ScrapeInterval: 20 * time.Millisecond,
	})
	ctx := t.Context()
	s.reg.Start(ctx)
	epB := s.reg.Endpoints()[1]
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":4}`)

	addr := strings.TrimPrefix(b.URL, "http://")
	b.Close() // the engine dies
	for range 2 {
		if _, err := s.reg.Client().Send(ctx, epB, "/v1/chat/completions", body, nil, 1); err == nil {
			t.Fatal("a dead engine answered")
		}
	}
	if st := epB.BreakerState(); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after refused connections, want open", st)
	}
	waitUntil(t, "the health check to see the dead engine", func() bool { return !epB.Healthy() })

	s.load(t, ctx, 4, body)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen again on %s: %v", addr, err)
	}
	start(1, ln) // the engine restarts on the same address
	waitUntil(t, "the restarted engine to be healthy", epB.Healthy)
	waitUntil(t, "its breaker to close", func() bool { return epB.BreakerState() == gobreaker.StateClosed })
	served := hits[1].Load()
	waitUntil(t, "turns to reach it", func() bool { return hits[1].Load() > served })
}
