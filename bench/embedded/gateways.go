package embedded

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/stack"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// Gateways are the options of active-active runs: how many gateways
// share the embedded fleet, and the Redis they share.
type Gateways struct {
	// Count is the gateways of an entry that names none.
	Count int
	// RedisURL is the Redis they share; empty: each run starts a
	// redis-server of its own on a private loopback port.
	RedisURL string
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

// startGateways starts n gateways, the first with the fleet fl,
// all on one Redis, behind a round-robin proxy: the Target bench runs
// against.
func (f *Fleet) startGateways(ctx context.Context, n int, g *Gateways, cfg *stack.Config, fl *sim.Topology, log *slog.Logger) (_ bench.Target, stop func() error, err error) {
	stopRedis, err := g.state(cfg)
	if err != nil {
		return bench.Target{}, nil, err
	}
	group, err := stack.NewGroup(n, cfg, stack.Options{Logger: log, Fleet: fl})
	if err == nil {
		err = group.Start(ctx)
	}
	if err != nil {
		stopRedis()
		return bench.Target{}, nil, fmt.Errorf("bench: %w", err)
	}
	t := f.target(group.First(), fl)
	t.BaseURL = "http://" + group.Addr()
	return t, func() error { return errors.Join(group.Close(context.Background()), stopRedis()) }, nil
}

// state points cfg's state at the Redis the gateways share, under a key
// prefix of the run's own: RedisURL's, or a redis-server started for
// the run, which stop stops.
func (g *Gateways) state(cfg *stack.Config) (stop func() error, err error) {
	cfg.State = state.Config{Backend: state.BackendRedis, URL: g.RedisURL, KeyPrefix: "turnpike-bench-" + rand.Text() + ":"}
	if g.RedisURL != "" {
		return func() error { return nil }, nil
	}
	dir, err := os.MkdirTemp("", "turnpike-bench-redis-")
	if err != nil {
		return nil, err
	}
	srv, err := redistest.Launch(dir)
	if err != nil {
		os.RemoveAll(dir)
		if errors.Is(err, redistest.ErrNotInstalled) {
			return nil, fmt.Errorf("bench: gateways share state in Redis: %s, or pass --redis-url", redistest.SkipMessage)
		}
		return nil, fmt.Errorf("bench: starting redis-server: %w", err)
	}
	cfg.State.URL = srv.URL()
	return func() error { srv.Stop(); return os.RemoveAll(dir) }, nil
}
