package main

import (
	"context"
	"crypto/rand"
	"flag"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/pools"
)

// lendingMaxNumSeqs is the lending stack's engines' max_num_seqs
// (--lending-max-num-seqs).
var lendingMaxNumSeqs = 8

// lendablePool is the name of the lendable pool of the lending stack.
const lendablePool = "trainer"

// lendingStack is a gateway over two pools of simulated engines: one of
// its own ("sim") and a lendable one (lendablePool), with the admin API on.
type lendingStack struct {
	*stack
	fleet      *fleet
	adminToken string
	dataDir    string
}

// startLendingStack starts own engines on ownCfg for the pool of its own
// and lent engines on lentCfg for the lendable pool, and a gateway over
// both.
func startLendingStack(ctx context.Context, ownCfg, lentCfg sim.Config, own, lent int, policy string, sched *pools.LendSchedule, log *slog.Logger) (_ *lendingStack, err error) {
	ls := &lendingStack{fleet: &fleet{}, adminToken: rand.Text()}
	defer func() {
		if err != nil {
			ls.Close(context.Background())
		}
	}()
	if ls.dataDir, err = os.MkdirTemp("", "turnpike-lending-"); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		name string
		n    int
		cfg  sim.Config
	}{{"sim", own, ownCfg}, {lendablePool, lent, lentCfg}} {
		c := p.cfg
		c.Name = p.name
		sf, err := sim.StartFleet(ctx, p.n, c, "127.0.0.1", 0)
		if err != nil {
			return nil, err
		}
		ls.fleet.fleets = append(ls.fleet.fleets, sf)
		pc := simPool(&c, sf, p.name, "")
		pc.Lendable = p.name == lendablePool
		if pc.Lendable {
			pc.LendSchedule = sched
		}
		ls.fleet.pools = append(ls.fleet.pools, pc)
	}
	cfg := &Config{Addr: "127.0.0.1:0", DataDir: ls.dataDir}
	cfg.Routing.Policy = policy
	cfg.Admin.AdminToken = ls.adminToken
	cfg.Pools = ls.fleet.pools
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ls.stack, err = startStack(ctx, cfg, nil, log); err != nil {
		return nil, err
	}
	return ls, nil
}

// target is the bench target of the stack.
func (ls *lendingStack) target() bench.Target {
	t := bench.Target{BaseURL: "http://" + ls.addr, Lending: &bench.LendingTarget{AdminToken: ls.adminToken, Pool: lendablePool}}
	for i, sf := range ls.fleet.fleets {
		for _, u := range sf.URLs {
			t.EngineMetricsURLs = append(t.EngineMetricsURLs, u+"/metrics")
			if ls.fleet.pools[i].Lendable {
				t.Lending.EngineURLs = append(t.Lending.EngineURLs, u)
			}
		}
	}
	t.Lending.FleetMetricsURLs = t.EngineMetricsURLs
	return t
}

// Close stops the gateway, then the engines.
func (ls *lendingStack) Close(ctx context.Context) error {
	var err error
	if ls.stack != nil {
		err = ls.stack.Close(ctx)
	}
	ls.fleet.Close()
	if ls.dataDir != "" {
		os.RemoveAll(ls.dataDir)
	}
	return err
}

// registerLendingFlags adds the lending workload's flags; it returns the
// lendable pool's replica count.
func registerLendingFlags(fs *flag.FlagSet, lc *bench.LendingConfig) *int {
	fs.Float64Var(&lc.TrainerDuty, "trainer-duty", bench.DefaultTrainerDuty, "lending: share of each cycle the simulated trainer keeps its pool busy")
	fs.DurationVar((*time.Duration)(&lc.TrainerCycle), "trainer-cycle", bench.DefaultTrainerCycle, "lending: length of one trainer cycle (busy, then idle)")
	fs.IntVar(&lc.Cycles, "lending-cycles", bench.DefaultLendingCycles, "lending: trainer cycles of each run (alone, with lending)")
	fs.DurationVar((*time.Duration)(&lc.ReclaimDeadline), "reclaim-deadline", bench.DefaultReclaimDeadline, "lending: reclaim this long before the trainer's next busy phase, with this deadline")
	fs.IntVar(&lc.AsyncJobs, "async-jobs", bench.DefaultAsyncJobs, "lending: background responses kept in flight")
	fs.IntVar(&lc.AsyncOutputTokens, "async-output-tokens", bench.DefaultAsyncOutput, "lending: max_output_tokens of each background response")
	fs.IntVar(&lendingMaxNumSeqs, "lending-max-num-seqs", lendingMaxNumSeqs, "lending: every engine's max_num_seqs, so that the engines, not the CPUs running the benchmark, bound the background work")
	return fs.Int("lendable-replicas", 2, "lending: engines of the lendable pool (the gateway's own pool has --sim-replicas)")
}

// benchLending runs the lending workload on a lending stack of its own.
func benchLending(ctx context.Context, cfg *bench.Config, sf *simFlags, lendable int, stdout io.Writer, out string, log *slog.Logger) error {
	simCfg := sf.config()
	simCfg.MaxNumSeqs = lendingMaxNumSeqs
	ls, err := startLendingStack(ctx, simCfg, simCfg, sf.replicas, lendable, sf.policy, nil, log)
	if err != nil {
		return err
	}
	res, err := bench.Run(ctx, *cfg, ls.target())
	ls.Close(context.Background())
	if err != nil {
		return err
	}
	res.Policy = sf.policy
	return writeResults(stdout, out, res, nil)
}

// flagSet reports whether the command line set the named flag.
func flagSet(fs *flag.FlagSet, name string) (set bool) {
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
