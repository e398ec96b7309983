package main

import (
	"testing"

	"github.com/turnpike-gateway/turnpike/pools"
)

func TestTierTopologies(t *testing.T) {
	base := simFlags{replicas: 2, accelerator: "mi300x", model: "llama-3.1-70b", kvCPUBlocks: 0, kvDiskBlocks: 10, kvSharedBlocks: 20}
	for _, tc := range []struct {
		topology           string
		cpu, disk, shared  int
		cpuFromHBMMultiple bool
	}{
		{topology: topologyHBM},
		{topology: topologyCPUTier, disk: 10, shared: 20, cpuFromHBMMultiple: true},
		{topology: topologyAggregated, disk: 10, shared: 20},
	} {
		f := base
		f.topology = tc.topology
		sf, err := f.fleet()
		if err != nil {
			t.Fatalf("%s: %v", tc.topology, err)
		}
		c := sf.cfg
		if tc.cpuFromHBMMultiple {
			hbm, err := hbmBlocks(&c)
			if err != nil {
				t.Fatal(err)
			}
			tc.cpu = defaultCPUTierFactor * hbm
		}
		if c.KVCPUBlocks != tc.cpu || c.KVDiskBlocks != tc.disk || c.KVSharedBlocks != tc.shared {
			t.Errorf("%s: tiers cpu %d disk %d shared %d, want %d %d %d", tc.topology,
				c.KVCPUBlocks, c.KVDiskBlocks, c.KVSharedBlocks, tc.cpu, tc.disk, tc.shared)
		}
	}
	f := base
	f.topology, f.kvCPUBlocks = topologyCPUTier, 123
	if sf, _ := f.fleet(); sf.cfg.KVCPUBlocks != 123 {
		t.Errorf("cpu-tier ignores --sim-kv-cpu-blocks: %d", sf.cfg.KVCPUBlocks)
	}
	if p, top := benchEntry("cpu-tier", &simFlags{policy: "cache-aware", topology: topologyAggregated}); p != "cache-aware" || top != topologyCPUTier {
		t.Errorf("benchEntry(cpu-tier) = %s, %s", p, top)
	}
}

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
