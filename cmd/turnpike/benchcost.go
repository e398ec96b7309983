package main

import (
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/bench"
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
func benchTTFTTargets(cfg *Config, timeScale float64, target time.Duration) {
	wall := wallTime(target, timeScale)
	cfg.Routing.Cost.TTFTTargets = map[string]time.Duration{
		affinity.BandInteractive: wall, affinity.BandStandard: wall, affinity.BandBackground: wall,
	}
}

// benchCost prices an embedded bench run: each pool of the fleet at its
// accelerator's catalog price, its engines numbered as Target's, on the
// simulated clock; its SLO attainment against target on that clock.
func benchCost(f *fleet, timeScale float64, target time.Duration) *bench.CostSetup {
	setup := &bench.CostSetup{ClockScale: 1, TTFTTarget: bench.Duration(wallTime(target, timeScale))}
	if timeScale > 0 {
		setup.ClockScale = 1 / timeScale
	}
	next := 0
	for _, pc := range f.pools {
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
