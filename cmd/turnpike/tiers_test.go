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
)

func TestTierTopologies(t *testing.T) {
	base := simFlags{replicas: 2, accelerator: "mi300x", model: "llama-3.1-70b", kvCPUBlocks: 0, kvDiskBlocks: 10, kvSharedBlocks: 20}
	for _, tc := range []struct {
		topology           string
		cpu, disk, shared  int
		cpuFromHBMMultiple bool
	}{
		{topology: sim.TopologyHBM},
		{topology: sim.TopologyCPUTier, disk: 10, shared: 20, cpuFromHBMMultiple: true},
		{topology: sim.TopologyAggregated, disk: 10, shared: 20},
	} {
		f := base
		f.topology = tc.topology
		sf, err := f.fleet()
		if err != nil {
			t.Fatalf("%s: %v", tc.topology, err)
		}
		c := sf.Config
		if tc.cpuFromHBMMultiple {
			hbm, err := sim.HBMBlocks(&c)
			if err != nil {
				t.Fatal(err)
			}
			tc.cpu = sim.DefaultCPUTierFactor * hbm
		}
		if c.KVCPUBlocks != tc.cpu || c.KVDiskBlocks != tc.disk || c.KVSharedBlocks != tc.shared {
			t.Errorf("%s: tiers cpu %d disk %d shared %d, want %d %d %d", tc.topology,
				c.KVCPUBlocks, c.KVDiskBlocks, c.KVSharedBlocks, tc.cpu, tc.disk, tc.shared)
		}
	}
	f := base
	f.topology, f.kvCPUBlocks = sim.TopologyCPUTier, 123
	if sf, _ := f.fleet(); sf.Config.KVCPUBlocks != 123 {
		t.Errorf("cpu-tier ignores --sim-kv-cpu-blocks: %d", sf.Config.KVCPUBlocks)
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
		sub.Start(ctx)
		defer sub.Close(context.Background())
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
