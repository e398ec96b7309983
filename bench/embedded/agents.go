package embedded

import (
	"github.com/turnpike-gateway/turnpike/accelerators"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
)

// PrefillRate is one replica's modelled prefill rate, in tokens a
// simulated second, of model on accelerator (catalog names): the agents
// workload's TTFT floor. 0 when either is not in the catalog.
func PrefillRate(accelerator, model string) float64 {
	acc, ok1 := accelerators.LookupAccelerator(accelerator)
	m, ok2 := accelerators.LookupModel(model)
	if !ok1 || !ok2 {
		return 0
	}
	const tokens = 1 << 20
	t := accelerators.PrefillTime(acc, m, tokens)
	if t <= 0 {
		return 0
	}
	return tokens / t.Seconds()
}

// agentsApart runs the agents workload's engines in two `turnpike sim`
// processes when the fleet allows it (one aggregated pool behind one
// gateway), so that this process's CPU and RSS are the gateway's and the
// bench client's.
func agentsApart(fl *sim.Topology, gateways int, onRedis bool) {
	if gateways != 1 || onRedis || fl.Prefill != 0 || fl.Mixed || fl.Config.KVSharedBlocks != 0 || fl.Replicas < 2 {
		return
	}
	fl.Apart = []int{fl.Replicas / 2, fl.Replicas - fl.Replicas/2}
}
