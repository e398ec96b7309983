package stack

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/redis/go-redis/v9"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// startRealTimeEngine serves a simulated engine of model at real time on
// a loopback port until t ends, and is the pool that lists it: its
// answers last long enough for a test to act while they run.
func startRealTimeEngine(t *testing.T, model string) pools.PoolConfig {
	t.Helper()
	eng, err := sim.New(sim.Config{ServedModelName: model, TimeScale: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() { srv.Close(); eng.Close() })
	return pools.PoolConfig{Name: "p", ServedModels: []string{model}, Endpoints: []pools.EndpointConfig{{URL: srv.URL}}}
}

// startPoolGateway starts a gateway of the one pool, its config changed
// by tune, and returns it and a client of its OpenAI API.
func startPoolGateway(t *testing.T, pool pools.PoolConfig, tune func(*Config), opts Options) (*Stack, openai.Client) {
	t.Helper()
	cfg := &Config{}
	cfg.Pools = []pools.PoolConfig{pool}
	cfg.EnsureDefaults()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	tune(cfg)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(context.Background()) })
	return st, openai.NewClient(option.WithBaseURL("http://"+st.Addr()+"/v1"), option.WithAPIKey("k"), option.WithMaxRetries(0))
}

// startRedisGateway starts a gateway on the Redis at url serving pool,
// whose background responses' leases last lease.
func startRedisGateway(t *testing.T, url string, pool pools.PoolConfig, lease time.Duration) (*Stack, openai.Client) {
	t.Helper()
	return startPoolGateway(t, pool, func(cfg *Config) {
		cfg.State = state.Config{Backend: state.BackendRedis, URL: url}
		cfg.Server.ShutdownDelay = -1
		cfg.Responses.JobLease = lease
		cfg.Responses.JobPoll = 20 * time.Millisecond
	}, Options{})
}

// TestShutdownHandsJobsOver (issue 35): a gateway stopped gracefully
// while it runs a background response releases the response's lease as
// it stops, not when the lease would have run out, and the other gateway
// on the store takes the response over and runs it to its end.
func TestShutdownHandsJobsOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine and two gateways")
	}
	const model = "m"
	srv := redistest.Start(t)
	pool := startRealTimeEngine(t, model)
	a, ca := startRedisGateway(t, srv.URL(), pool, 3*time.Second)
	_, cb := startRedisGateway(t, srv.URL(), pool, 3*time.Second)

	r, err := ca.Responses.New(t.Context(), responses.ResponseNewParams{
		Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Tell me a long story.")},
		MaxOutputTokens: openai.Int(300), Background: openai.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The response's lease, as Redis holds it: under the responses'
	// namespace, apart from its keys.
	ro, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(ro)
	defer rdb.Close()
	leaseKey := state.DefaultRedisKeyPrefix + "{rs/}ll/" + r.ID
	var holder string
	eventually(t, "gateway A to run the response under its lease", func() bool {
		holder, _ = rdb.Get(t.Context(), leaseKey).Result()
		got, err := cb.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{})
		return err == nil && got.Status == responses.ResponseStatusInProgress && holder != ""
	})

	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if now, _ := rdb.Get(t.Context(), leaseKey).Result(); now == holder {
		t.Fatalf("after a graceful stop the stopped gateway still holds the lease (%s)", holder)
	}
	var end *responses.Response
	eventually(t, "gateway B to run the response to its end", func() bool {
		end, err = cb.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{})
		return err == nil && end.Status != responses.ResponseStatusInProgress && end.Status != responses.ResponseStatusQueued
	})
	if end.Status != responses.ResponseStatusCompleted && end.Status != responses.ResponseStatusIncomplete || end.OutputText() == "" {
		t.Fatalf("the handed-over response ended %s with %q", end.Status, end.OutputText())
	}
}
