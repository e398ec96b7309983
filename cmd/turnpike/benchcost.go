package main

import (
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// wallTime is d on the simulated clock as wall time: timeScale wall
// seconds per simulated second, 0 counting wall time.
func wallTime(d time.Duration, timeScale float64) time.Duration {
	if timeScale > 0 {
		return time.Duration(float64(d) * timeScale)
	}
	return d
}

// benchTTFTTargets holds every band of the embedded gateway's price
// scorer to target on the simulated clock (wall time, as the gateway
// measures), the target the cost report measures SLO attainment against.
func benchTTFTTargets(cfg *stack.Config, timeScale float64, target time.Duration) {
	wall := wallTime(target, timeScale)
	cfg.Routing.Cost.TTFTTargets = map[string]time.Duration{
		affinity.BandInteractive: wall, affinity.BandStandard: wall, affinity.BandBackground: wall,
	}
}

// minBenchScrape bounds how often the embedded gateway scrapes each
// simulated engine.
const minBenchScrape = 10 * time.Millisecond

// benchScrapes runs the embedded gateway's engine scrapes on the simulated
// fleet's clock, as benchTTFTTargets does its targets: a fleet ten times
// faster than real time empties and fills its queues ten times as fast,
// so the gateway reads them ten times as often (the default 200 ms of
// modelled time, 20 ms of wall time at --sim-time-scale 0.1), and a queue
// that has emptied holds turns at the gateway no longer, in the engines'
// time, than it would on the hardware they model. A config that sets the
// interval keeps it.
func benchScrapes(cfg *stack.Config, timeScale float64) {
	if cfg.Fleet.ScrapeInterval > 0 || timeScale <= 0 || timeScale >= 1 {
		return
	}
	cfg.Fleet.ScrapeInterval = max(wallTime(pools.DefaultScrapeInterval, timeScale), minBenchScrape)
}

// benchCost prices an embedded bench run: each pool of the fleet at its
// accelerator's catalog price, its engines numbered as Target's, on the
// simulated clock; its SLO attainment against target on that clock.
func benchCost(ps []pools.PoolConfig, timeScale float64, target time.Duration) *bench.CostSetup {
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
