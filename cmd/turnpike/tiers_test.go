package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/kv"
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

// TestTierEventsReachTheIndex runs two simulated engines with CPU and
// shared tiers, publishing KV events to subscribers as serve wires them:
// blocks one engine moves down show in its CPU tier, and the pool's shared
// store counts for the replica that never saw them.
func TestTierEventsReachTheIndex(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := sim.StartFleet(ctx, 2, sim.Config{
		NumBlocks: 40, KVCPUBlocks: 20, KVSharedBlocks: 1000,
		KVEventsAddr: "tcp://127.0.0.1:0",
	}, "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ix := kv.NewIndex(kv.IndexOptions{})
	log := slog.New(slog.DiscardHandler)
	var subs []*kv.Subscriber
	for i, e := range f.Engines {
		ix.SetGroup(i, 0)
		sub, err := kv.NewSubscriber(ix, kv.SubscriberConfig{Endpoint: i, Addr: e.KVEventsAddr(), Model: e.Config().ServedModelName, Hasher: &kv.Hasher{}, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
		go sub.Run(ctx)
	}
	// Wait for the subscriptions, then fill engine 0 with distinct prompts
	// of about 13 blocks each: past 40 blocks of HBM and 20 of CPU.
	deadline := time.Now().Add(20 * time.Second)
	for seed := 0; ; seed++ {
		if time.Now().After(deadline) {
			t.Fatalf("index after %d prompts: engine 0 %+v, engine 1 %+v; subscriber %+v",
				seed, ix.EndpointStats(0), ix.EndpointStats(1), subs[0].Stats())
		}
		body := fmt.Sprintf(`{"model":%q,"prompt":"%s","max_tokens":2}`, f.Engines[0].Config().ServedModelName,
			strings.Repeat(fmt.Sprintf("p%d tier words ", seed), 60))
		resp, err := http.Post(f.URLs[0]+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		s0, s1 := ix.EndpointStats(0), ix.EndpointStats(1)
		if s0.Blocks[kv.CPU] > 0 && s0.Blocks[kv.Shared] > 0 && s1.Blocks[kv.Shared] == s0.Blocks[kv.Shared] && s1.Blocks[kv.CPU] == 0 {
			if s0.Blocks[kv.CPU] > 20 {
				t.Errorf("engine 0 holds %d CPU blocks in the index, its tier 20", s0.Blocks[kv.CPU])
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
