package embedded

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// lendablePool is the name of the lendable pool of the lending stack.
const lendablePool = "trainer"

// lendingStack is a gateway over two pools of simulated engines: one of
// its own ("sim") and a lendable one (lendablePool), with the admin API on.
type lendingStack struct {
	*stack.Stack
	fleet      *sim.Fleets
	adminToken string
	dataDir    string
}

// startLendingStack starts own engines on ownCfg for the pool of its own
// and lent engines on lentCfg for the lendable pool, and a gateway over
// both.
func startLendingStack(ctx context.Context, ownCfg, lentCfg sim.Config, own, lent int, policy string, sched *pools.LendSchedule, log *slog.Logger) (_ *lendingStack, err error) {
	ls := &lendingStack{adminToken: rand.Text()}
	defer func() {
		if err != nil {
			ls.Close(context.Background())
		}
	}()
	if ls.dataDir, err = os.MkdirTemp("", "turnpike-lending-"); err != nil {
		return nil, err
	}
	ownCfg.Name, lentCfg.Name = "sim", lendablePool
	ls.fleet = sim.NewFleets([]sim.Pool{{Name: "sim", Config: ownCfg, Size: own}, {Name: lendablePool, Config: lentCfg, Size: lent}})
	if err := ls.fleet.Start(ctx); err != nil {
		ls.fleet = nil // Start stopped what it started
		return nil, err
	}
	cfg := &stack.Config{Addr: "127.0.0.1:0", DataDir: ls.dataDir}
	cfg.Routing.Policy = policy
	cfg.Admin.AdminToken = ls.adminToken
	cfg.Pools = stack.SimPools(ls.fleet, "")
	cfg.Pools[1].Lendable, cfg.Pools[1].LendSchedule = true, sched
	cfg.EnsureDefaults()
	if ls.Stack, err = stack.New(cfg, stack.Options{Logger: log}); err != nil {
		return nil, err
	}
	if err := ls.Start(ctx); err != nil {
		ls.Stack = nil // Start closed what it started
		return nil, err
	}
	return ls, nil
}

// target is the bench target of the stack.
func (ls *lendingStack) target() bench.Target {
	t := bench.Target{BaseURL: "http://" + ls.Addr(), Lending: &bench.LendingTarget{AdminToken: ls.adminToken, Pool: lendablePool}}
	for i, p := range ls.fleet.Pools {
		for _, r := range p.Replicas {
			t.EngineMetricsURLs = append(t.EngineMetricsURLs, r.URL+"/metrics")
			if ls.Pools()[i].Lendable {
				t.Lending.EngineURLs = append(t.Lending.EngineURLs, r.URL)
			}
		}
	}
	t.Lending.FleetMetricsURLs = t.EngineMetricsURLs
	return t
}

// Close stops the gateway, then the engines.
func (ls *lendingStack) Close(ctx context.Context) error {
	var err error
	if ls.Stack != nil {
		err = ls.Stack.Close(ctx)
	}
	if ls.fleet != nil {
		ls.fleet.Close(ctx)
	}
	if ls.dataDir != "" {
		os.RemoveAll(ls.dataDir)
	}
	return err
}

// Lending runs the lending workload on a lending stack of its own: the
// fleet's replicas in the gateway's own pool, lendable in the lendable
// one, every engine with maxNumSeqs (its max_num_seqs).
func (f *Fleet) Lending(ctx context.Context, cfg *bench.Config, lendable, maxNumSeqs int, stdout io.Writer, out string, log *slog.Logger) error {
	simCfg := f.Sim
	simCfg.MaxNumSeqs = maxNumSeqs
	ls, err := startLendingStack(ctx, simCfg, simCfg, f.Replicas, lendable, f.Policy, nil, log)
	if err != nil {
		return err
	}
	res, err := bench.Run(ctx, *cfg, ls.target())
	ls.Close(context.Background())
	if err != nil {
		return err
	}
	res.Policy = f.Policy
	return WriteResults(stdout, out, res, nil)
}
