package embedded

import (
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// Fleet is the embedded simulated fleet the workloads run on, as cmd's
// flags describe it, and how the bench measures it.
type Fleet struct {
	// New describes the fleet of the given topology (sim.TopologyPD…; ""
	// is Topology's): its engines' config and layout.
	New func(topology string) (*sim.Topology, error)
	// Topology is the fleet's layout; Policy the gateway's routing
	// policy, of a --compare entry that names a topology alone.
	Topology, Policy string
	// Sim and Replicas are the engines' config and count, for a workload
	// that lays out a fleet of its own (lending).
	Sim      sim.Config
	Replicas int
	// TimeScale is the engines' wall seconds per simulated second (0:
	// wall time); TTFTTarget the TTFT target on the simulated clock, of
	// the cost report's SLO attainment and the price scorer's bands.
	TimeScale  float64
	TTFTTarget time.Duration
	// FlushInterval is the gateway's server.flushInterval on the
	// simulated clock.
	FlushInterval time.Duration
	// Apart runs the isolation workload's engines in two processes (the
	// interactive lane's engine, then the rest).
	Apart bool
	// LoRA shapes the lora workload's engines.
	LoRA LoRAFleet
	// AgentsApart runs the agents workload's engines in two processes.
	AgentsApart bool
	// GatewayConfig is the gateway's config file (stack.Decode), without
	// pools, that Start's gateways begin from; nil: the defaults.
	GatewayConfig []byte
}

// wallTime is d on the simulated clock as wall time: timeScale wall
// seconds per simulated second, 0 counting wall time.
func wallTime(d time.Duration, timeScale float64) time.Duration {
	if timeScale > 0 {
		return time.Duration(float64(d) * timeScale)
	}
	return d
}

// ttftTargets holds every band of the embedded gateway's price
// scorer to target on the simulated clock (wall time, as the gateway
// measures), the target the cost report measures SLO attainment against.
func ttftTargets(cfg *stack.Config, timeScale float64, target time.Duration) {
	wall := wallTime(target, timeScale)
	cfg.Routing.Cost.TTFTTargets = map[string]time.Duration{
		affinity.BandInteractive: wall, affinity.BandStandard: wall, affinity.BandBackground: wall,
	}
}

// minScrape bounds how often the embedded gateway scrapes each
// simulated engine.
const minScrape = 10 * time.Millisecond

// minHealth is the shortest interval between an embedded gateway's health
// probes of an engine.
const minHealth = 100 * time.Millisecond

// scrapes runs the embedded gateway's engine scrapes on the simulated
// fleet's clock, as ttftTargets does its targets: a fleet ten times
// faster than real time empties and fills its queues ten times as fast,
// so the gateway reads them ten times as often (the default 200 ms of
// modelled time, 20 ms of wall time at --sim-time-scale 0.1), and a queue
// that has emptied holds turns at the gateway no longer, in the engines'
// time, than it would on the hardware they model; a slower fleet is read
// as much less often, so that the scrapes' CPU a turn is what it would
// be at the hardware's speed. A config that sets another interval than
// the default keeps it. The engines' KV events are read on the same
// clock (the default 20 ms of modelled time), and their health probed on
// it (the default 2 s, at least 100 ms of wall time).
func scrapes(cfg *stack.Config, timeScale float64) {
	if timeScale <= 0 || timeScale == 1 {
		return
	}
	if cfg.Fleet.KVEventsInterval == 0 {
		cfg.Fleet.KVEventsInterval = wallTime(kv.DefaultReadInterval, timeScale)
	}
	if set := cfg.Fleet.HealthInterval; set <= 0 || set == pools.DefaultHealthInterval {
		cfg.Fleet.HealthInterval = max(wallTime(pools.DefaultHealthInterval, timeScale), minHealth)
	}
	if set := cfg.Fleet.ScrapeInterval; set > 0 && set != pools.DefaultScrapeInterval {
		return
	}
	cfg.Fleet.ScrapeInterval = max(wallTime(pools.DefaultScrapeInterval, timeScale), minScrape)
	// A load goes stale after three scrapes missed, not sooner than by
	// default.
	cfg.Fleet.StaleAfter = max(cfg.Fleet.StaleAfter, pools.DefaultStaleAfter, 3*cfg.Fleet.ScrapeInterval)
}

// flushes spaces the embedded gateway's stream writes by interval on the
// simulated fleet's clock, as scrapes does its scrapes: tokens come
// timeScale times slower in wall time, and so many as the hardware
// modelled would send in an interval go out together.
func flushes(cfg *stack.Config, timeScale float64, interval time.Duration) {
	cfg.Server.FlushInterval = min(wallTime(interval, timeScale), dispatch.MaxFlushInterval)
}

// cost prices an embedded bench run: each pool of the fleet at its
// accelerator's catalog price, its engines numbered as Target's, on the
// simulated clock; its SLO attainment against target on that clock.
func cost(ps []pools.PoolConfig, timeScale float64, target time.Duration) *bench.CostSetup {
	setup := &bench.CostSetup{ClockScale: 1, TTFTTarget: bench.Duration(wallTime(target, timeScale))}
	if timeScale > 0 {
		setup.ClockScale = 1 / timeScale
	}
	next := 0
	for _, pc := range ps {
		ps := bench.PoolSetup{Name: pc.Name, Accelerator: pc.Accelerator}
		acc, okA := accelerators.LookupAccelerator(pc.Accelerator)
		model, okM := accelerators.LookupModel(pc.Model)
		if okA {
			ps.DollarsPerHour = acc.DollarsPerHour
		}
		if okA && okM {
			const tokens = 8192 // one full step: the compute-bound rate
			ps.PrefillSecondsPerToken = accelerators.PrefillTime(acc, model, tokens).Seconds() / tokens
		}
		for range pc.Endpoints {
			ps.Engines = append(ps.Engines, next)
			next++
		}
		setup.Pools = append(setup.Pools, ps)
	}
	return setup
}

// target is what bench runs against on a stack with an embedded
// fleet: its gateway, its engines' metrics and their KV capacity.
func (f *Fleet) target(st *stack.Stack, fl *sim.Topology) bench.Target {
	engines := st.Fleet()
	t := bench.Target{BaseURL: "http://" + st.Addr(), Replicas: engines, EngineURLs: engines.URLs(), Cost: cost(st.Pools(), f.TimeScale, f.TTFTTarget)}
	if tok, ok := fl.Config.Tokenizer.(stack.SimTokenizer); ok {
		t.SystemTokens = tok.SystemTokens
	}
	for _, u := range engines.URLs() {
		t.EngineMetricsURLs = append(t.EngineMetricsURLs, u+"/metrics")
	}
	t.KVCapacityTokens = engines.KVCapacityTokens()
	return t
}
