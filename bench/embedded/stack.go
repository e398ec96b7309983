package embedded

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/stack"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Start starts a fresh simulated fleet and gateway for a --compare entry
// (a policy, a topology, an index mode, gateways: see the bench's
// --compare) on ephemeral ports: fresh engine caches for every entry. It
// returns the target to run against and the function that stops it all.
func (f *Fleet) Start(ctx context.Context, entry string, gws *Gateways, bc bench.Config, log *slog.Logger) (bench.Target, func() error, error) {
	entry, gateways, onRedis, err := gatewaysOf(entry, gws.Count)
	if err != nil {
		return bench.Target{}, nil, err
	}
	if entry == "" {
		entry = f.Policy
	}
	entry, index := f.indexMode(entry)
	policy, topology := f.entry(entry)
	dataDir, err := os.MkdirTemp("", "turnpike-bench-")
	if err != nil {
		return bench.Target{}, nil, err
	}
	cfg := &stack.Config{}
	if f.GatewayConfig != nil {
		if cfg, err = stack.Decode(f.GatewayConfig); err != nil {
			os.RemoveAll(dataDir)
			return bench.Target{}, nil, err
		}
	}
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", dataDir
	cfg.Routing.Policy = policy
	cfg.EnsureDefaults()
	tenants(cfg, bc)
	fl, err := f.New(topology)
	if err != nil {
		os.RemoveAll(dataDir)
		return bench.Target{}, nil, err
	}
	if bc.Workload == bench.WorkloadLoRA {
		f.LoRA.apply(&fl.Config, bc.LoRA)
	}
	ttftTargets(cfg, f.TimeScale, f.TTFTTarget)
	scrapes(cfg, f.TimeScale)
	flushes(cfg, f.TimeScale, f.FlushInterval)
	if f.Apart && bc.Workload == bench.WorkloadIsolation && gateways == 1 && !onRedis &&
		fl.Prefill == 0 && !fl.Mixed && fl.Config.KVSharedBlocks == 0 {
		// The interactive lane (the first endpoint) in one process, the
		// rest in another: under round-robin too, the same fleet.
		fl.Apart = []int{1}
		if fl.Replicas > 1 {
			fl.Apart = append(fl.Apart, fl.Replicas-1)
		}
	}
	if f.AgentsApart && bc.Workload == bench.WorkloadAgents {
		agentsApart(fl, gateways, onRedis)
	}
	if index == indexApproximate {
		// Engines that publish no KV events: the gateway subscribes to
		// none, and its index holds only what it routed.
		fl.Config.KVEventsAddr = ""
	}
	if gateways > 1 || onRedis {
		t, stop, err := f.startGateways(ctx, gateways, gws, cfg, fl, log)
		if err != nil {
			os.RemoveAll(dataDir)
			return t, nil, err
		}
		return t, func() error { err := stop(); os.RemoveAll(dataDir); return err }, nil
	}
	st, err := stack.New(cfg, stack.Options{Logger: log, Fleet: fl})
	if err == nil {
		err = st.Start(ctx)
	}
	if err != nil {
		os.RemoveAll(dataDir)
		return bench.Target{}, nil, err
	}
	t := f.target(st, fl)
	stop := func() error {
		err := st.Close(context.Background())
		os.RemoveAll(dataDir)
		return err
	}
	return t, stop, nil
}

// entry reads a --compare entry: a policy (on the fleet's topology), a
// topology (with the fleet's policy), or policy@topology.
func (f *Fleet) entry(entry string) (policy, topology string) {
	policy, topology = entry, f.Topology
	if p, t, ok := strings.Cut(entry, "@"); ok {
		return p, t
	}
	switch entry {
	case sim.TopologyAggregated, sim.TopologyPD, sim.TopologyHBM, sim.TopologyCPUTier, sim.TopologyMixed:
		return f.Policy, entry
	}
	return policy, topology
}

// The KV index's modes a --compare entry may name.
const (
	// indexPrecise: the engines publish KV events and the gateway's
	// index follows them (stores, evictions, clears). The default.
	indexPrecise = "precise"
	// indexApproximate: the engines publish none; the index holds what
	// the gateway routed, bounded by each engine's scraped cache size.
	indexApproximate = "approximate"
)

// indexMode takes the KV index's mode off a --compare entry: a bare
// "precise" or "approximate" (with the fleet's policy), "policy@mode", or
// a topology entry with "+mode" (cache-aware@hbm+approximate). What is
// left is read by entry.
func (f *Fleet) indexMode(entry string) (rest, mode string) {
	for _, m := range []string{indexPrecise, indexApproximate} {
		switch {
		case entry == m:
			return f.Policy, m
		case strings.HasSuffix(entry, "@"+m):
			return strings.TrimSuffix(entry, "@"+m), m
		case strings.HasSuffix(entry, "+"+m):
			return strings.TrimSuffix(entry, "+"+m), m
		}
	}
	return entry, indexPrecise
}

// Keys picks the isolation scenario's tenant keys, fresh and random, once
// for the whole command: every stack a --compare starts is given the same
// tenants (tenants), and every run sends the keys bc holds when it
// starts. Other workloads run open.
func Keys(bc *bench.Config) {
	if bc.Workload != bench.WorkloadIsolation {
		return
	}
	bc.Isolation.KeyA, bc.Isolation.KeyB = rand.Text(), rand.Text()
	if bc.BatchLoad.Lines > 0 {
		bc.BatchLoad.Key = rand.Text()
	}
}

// tenants gives the isolation scenario its tenants on the embedded
// gateway, with Keys' keys: tenant A runs interactive turns, tenant
// B's agent loops are capped at the standard band, and a batch beside them
// has a tenant of its own held to the background band.
func tenants(cfg *stack.Config, bc bench.Config) {
	if bc.Workload != bench.WorkloadIsolation {
		return
	}
	cfg.Admin.Tenants = []admin.TenantConfig{
		{Tenant: turns.Tenant{Name: "tenant-a", Weight: 1, DefaultBand: turns.Interactive, MaxBand: turns.Interactive}, Keys: []string{auth.HashKey(bc.Isolation.KeyA).String()}},
		{Tenant: turns.Tenant{Name: "tenant-b", Weight: 1, DefaultBand: turns.Standard, MaxBand: turns.Standard}, Keys: []string{auth.HashKey(bc.Isolation.KeyB).String()}},
	}
	if bc.BatchLoad.Lines > 0 {
		cfg.Admin.Tenants = append(cfg.Admin.Tenants, admin.TenantConfig{
			Tenant: turns.Tenant{Name: "tenant-batch", Weight: 1, DefaultBand: turns.Background, MaxBand: turns.Background},
			Keys:   []string{auth.HashKey(bc.BatchLoad.Key).String()},
		})
	}
}

// WriteResults writes a run's result, or a comparison's, to dir
// (results.json, report.html, report.md) and its text to stdout.
func WriteResults(stdout io.Writer, dir string, res *bench.Result, cmp *bench.Comparison) error {
	var js any = res
	if cmp != nil {
		js = cmp
	}
	b, err := json.MarshalIndent(js, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return err
	}
	write := func(name string, fn func(io.Writer) error) error {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if cmp != nil {
		if err := cmp.WriteText(stdout); err != nil {
			return err
		}
		if err := write("report.html", cmp.WriteHTML); err != nil {
			return err
		}
		if err := write("report.md", cmp.WriteMarkdown); err != nil {
			return err
		}
	} else {
		if err := bench.WriteText(stdout, res); err != nil {
			return err
		}
		if err := write("report.html", func(w io.Writer) error { return bench.WriteHTML(w, res) }); err != nil {
			return err
		}
		if err := write("report.md", func(w io.Writer) error { return bench.WriteMarkdown(w, res) }); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nresults: %s/results.json, %s/report.html, %s/report.md\n", dir, dir, dir)
	return nil
}
