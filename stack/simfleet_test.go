package stack

import (
	"testing"

	"github.com/turnpike-gateway/turnpike/pools"
)

func TestCatalogTierWeights(t *testing.T) {
	// 70B on MI300X: a host-memory load is a small part of a recompute,
	// a disk or shared-store load a larger one.
	w := catalogTierWeights(nil, []pools.PoolConfig{{Accelerator: "mi300x", Model: "llama-3.1-70b"}})
	t.Logf("mi300x llama-3.1-70b: %v", w)
	if w["hbm"] != 1 || !(w["cpu"] > 0.9 && w["cpu"] < 1) || !(w["disk"] < w["cpu"]) || !(w["shared"] > 0 && w["shared"] < w["cpu"]) {
		t.Errorf("derived weights %v", w)
	}
	// A configured weight wins; mixed hardware takes the least credit.
	mixed := catalogTierWeights(map[string]float64{"disk": 0.3},
		[]pools.PoolConfig{{Accelerator: "mi300x", Model: "llama-3.1-70b"}, {Accelerator: "h100", Model: "llama-3.1-8b"}})
	if mixed["disk"] != 0.3 || !(mixed["cpu"] < w["cpu"]) {
		t.Errorf("mixed weights %v against %v", mixed, w)
	}
	// No catalog hardware: the configured map as it was.
	if got := catalogTierWeights(nil, []pools.PoolConfig{{}}); got != nil {
		t.Errorf("no catalog pools: %v", got)
	}
}
