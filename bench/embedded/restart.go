package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/bench/report"
	"github.com/turnpike-gateway/turnpike/bench/scenario/restart"
	"github.com/turnpike-gateway/turnpike/stack"
)

// WorkloadGatewayRestart is --workload gateway-restart: agentic sessions
// through the bench's front while each gateway is restarted in turn
// (bench/scenario/restart). Its sessions are the agentic workload's.
const WorkloadGatewayRestart = "gateway-restart"

// restartShutdownDelay is each gateway's server.shutdownDelay in the
// gateway-restart workload: ten of the front's readiness reads.
const restartShutdownDelay = time.Second

// restartGroup is gateways on one Redis and one embedded fleet, each
// restarted on its own address.
type restartGroup struct {
	log  *slog.Logger
	cfgs []*stack.Config
	mu   struct {
		sync.Mutex
		// protects the field below
		stacks []*stack.Stack
	}
}

// startRestartGroup starts n gateways on cfg (its state the shared
// Redis) serving pools.
func startRestartGroup(ctx context.Context, n int, cfg *stack.Config, log *slog.Logger) (*restartGroup, error) {
	g := &restartGroup{log: log}
	for i := range n {
		c := *cfg
		dir, err := os.MkdirTemp("", "turnpike-bench-")
		if err != nil {
			g.Close(ctx)
			return nil, err
		}
		c.DataDir = dir
		st, err := stack.New(&c, stack.Options{Logger: log.With("gateway", i)})
		if err == nil {
			err = st.Start(ctx)
		}
		if err != nil {
			os.RemoveAll(dir)
			g.Close(ctx)
			return nil, fmt.Errorf("bench: gateway %d: %w", i, err)
		}
		// Restarted, it listens where it did.
		c.Addr = st.Addr()
		g.cfgs = append(g.cfgs, &c)
		g.mu.stacks = append(g.mu.stacks, st)
	}
	return g, nil
}

// Len is the number of gateways.
func (g *restartGroup) Len() int { return len(g.cfgs) }

// Addrs are the gateways' addresses.
func (g *restartGroup) Addrs() []string {
	out := make([]string, len(g.cfgs))
	for i, c := range g.cfgs {
		out[i] = c.Addr
	}
	return out
}

// Restart shuts gateway i down as SIGTERM does and starts a new one on its
// address, its state where the old one left it (Redis).
func (g *restartGroup) Restart(ctx context.Context, i int) error {
	g.mu.Lock()
	old := g.mu.stacks[i]
	g.mu.stacks[i] = nil
	g.mu.Unlock()
	if err := old.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	// The old listener's port may stay taken for a moment.
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := stack.New(g.cfgs[i], stack.Options{Logger: g.log.With("gateway", i)})
		if err == nil {
			err = st.Start(ctx)
		}
		if err == nil {
			g.mu.Lock()
			g.mu.stacks[i] = st
			g.mu.Unlock()
			return nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("start: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close stops every gateway.
func (g *restartGroup) Close(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for i, st := range g.mu.stacks {
		if st != nil {
			errs = append(errs, st.Close(ctx))
		}
		if i < len(g.cfgs) {
			os.RemoveAll(g.cfgs[i].DataDir)
		}
	}
	return errors.Join(errs...)
}

// registerRestartFlags adds the gateway-restart workload's flags, and

// GatewayRestart runs the gateway-restart workload: an embedded
// fleet, gws.Count gateways (at least two) on one Redis behind the
// bench's front, each restarted rounds times in turn under the agentic
// sessions.
func (f *Fleet) GatewayRestart(ctx context.Context, cfg bench.Config, gws *Gateways, o restart.Options, stdout io.Writer, out string, log *slog.Logger) error {
	n := max(gws.Count, 2)
	fl, err := f.New("")
	if err != nil {
		return err
	}
	fleet := fl.Fleets()
	if err := fleet.Start(ctx); err != nil {
		return err
	}
	defer fleet.Close(context.Background())

	gcfg := &stack.Config{Addr: "127.0.0.1:0"}
	gcfg.Routing.Policy = f.Policy
	gcfg.EnsureDefaults()
	gcfg.Pools = stack.SimPools(fleet, fl.TokenizerDir)
	gcfg.Server.ShutdownDelay = restartShutdownDelay
	stopRedis, err := gws.state(gcfg)
	if err != nil {
		return err
	}
	defer stopRedis()
	group, err := startRestartGroup(ctx, n, gcfg, log)
	if err != nil {
		return err
	}
	defer group.Close(context.Background())
	front := restart.NewFront(group.Addrs())
	if err := front.Start(ctx); err != nil {
		return err
	}
	defer front.Close()

	t := bench.Target{BaseURL: "http://" + front.Addr(), EngineMetricsURLs: nil, KVCapacityTokens: fleet.KVCapacityTokens()}
	for _, u := range fleet.URLs() {
		t.EngineMetricsURLs = append(t.EngineMetricsURLs, u+"/metrics")
	}
	if tok, ok := fl.Config.Tokenizer.(stack.SimTokenizer); ok {
		t.SystemTokens = tok.SystemTokens
	}
	// Each session names its API; the chat one keeps the replies for the
	// next turn's history.
	cfg.API = bench.APIChat
	r, rep, err := restart.Run(ctx, cfg, t, WorkloadGatewayRestart, group, front, o)
	if err != nil {
		return err
	}
	res := report.ResultOf(r)
	res.Workload, res.Policy = WorkloadGatewayRestart, f.Policy
	if err := WriteResults(stdout, out, res, nil); err != nil {
		return err
	}
	rep.Text(stdout)
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "gateway-restart.json"), b, 0o644)
}

var _ restart.Gateways = (*restartGroup)(nil)
