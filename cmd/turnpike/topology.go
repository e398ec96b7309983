package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// Embedded fleet topologies (--sim-topology).
const (
	// topologyAggregated: every replica prefills and decodes, one pool.
	topologyAggregated = "aggregated"
	// topologyPD: a prefill pool and a decode pool of the same model,
	// disaggregated by the gateway (routing.pd): with vLLM's
	// kv_transfer_params, or SGLang's bootstrap fields when the flavour
	// (--sim-flavor) is sglang.
	topologyPD = "pd"
	// topologyHBM: aggregated with no KV tier below HBM, whatever the
	// tier flags say: the offload comparison's baseline.
	topologyHBM = "hbm"
	// topologyCPUTier: aggregated with a host-memory tier below HBM
	// (--sim-kv-cpu-blocks, or defaultCPUTierFactor × HBM).
	topologyCPUTier = "cpu-tier"
	// topologyMixed: two pools of one model on different hardware, an
	// H200 pool (vLLM) and a TPU v6e pool (vLLM on TPU, engine
	// vllm-tpu), half the replicas each: what the cost-aware policy
	// chooses between.
	topologyMixed = "mixed"
)

// The mixed topology's pools.
var mixedPools = []struct{ name, accelerator, flavor string }{
	{"gpu", "h200", sim.FlavorVLLM},
	{"tpu", "tpu-v6e", sim.FlavorVLLMTPU},
}

// mixedFleet makes sf the mixed topology, checking that the model fits
// every pool's chip.
func mixedFleet(sf *simFleet) error {
	if sf.replicas < len(mixedPools) {
		return fmt.Errorf("sim topology mixed: %d replicas: want at least one per pool (%d)", sf.replicas, len(mixedPools))
	}
	for _, mp := range mixedPools {
		c := sf.cfg
		c.Accelerator, c.Flavor = mp.accelerator, mp.flavor
		if n, err := hbmBlocks(&c); err != nil || n == 0 {
			return fmt.Errorf("sim topology mixed: model %s does not fit one %s chip beside its KV cache; try --sim-model llama-3.1-8b", c.Model, mp.accelerator)
		}
	}
	sf.mixed = true
	return nil
}

// defaultCPUTierFactor sizes the cpu-tier topology's host tier against
// HBM: hosts carry several times their accelerators' memory.
const defaultCPUTierFactor = 4

// hbmBlocks is the KV cache size of an engine configured by cfg, in blocks.
func hbmBlocks(cfg *sim.Config) (int, error) {
	c := *cfg
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return 0, err
	}
	if c.NumBlocks > 0 {
		return c.NumBlocks, nil
	}
	acc, _ := accelerators.LookupAccelerator(c.Accelerator)
	model, _ := accelerators.LookupModel(c.Model)
	return accelerators.KVBlocks(acc, model, c.BlockSize, c.GPUMemoryUtilization), nil
}

// catalogTierWeights fills the tier weights a config leaves unset with what
// a hit in each tier saves on the pools' hardware (kv.SavingsWeights): the
// time to recompute a block against the time to load it over the host link
// (CPU), from an NVMe disk and from a shared store at the simulator's
// default bandwidths. Pools with no catalog accelerator and model leave
// kv.DefaultTierWeights; pools on different hardware take, per tier, the
// least credit among them.
func catalogTierWeights(set map[string]float64, ps []pools.PoolConfig) map[string]float64 {
	var derived *kv.TierWeights
	for _, pc := range ps {
		acc, okA := accelerators.LookupAccelerator(pc.Accelerator)
		model, okM := accelerators.LookupModel(pc.Model)
		if !okA || !okM || acc.HostLinkBandwidth <= 0 {
			continue
		}
		const batch = 8192 // a full step's prefill: the compute-bound rate
		recompute := accelerators.PrefillTime(acc, model, batch) * time.Duration(kv.DefaultBlockSize) / batch
		bytes := float64(kv.DefaultBlockSize) * model.KVBytesPerToken()
		per := func(bw float64) time.Duration { return time.Duration(bytes / bw * float64(time.Second)) }
		w := kv.SavingsWeights(recompute, [kv.NumTiers]time.Duration{
			kv.CPU:    per(acc.HostLinkBandwidth),
			kv.Disk:   per(sim.DefaultKVDiskBandwidth),
			kv.Shared: per(sim.DefaultKVSharedBandwidth),
		})
		if derived == nil {
			derived = &w
			continue
		}
		for t := range derived {
			derived[t] = min(derived[t], w[t])
		}
	}
	if derived == nil {
		return set
	}
	out := make(map[string]float64, kv.NumTiers)
	for t, w := range derived {
		out[kv.Tier(t).String()] = w
	}
	for name, w := range set {
		out[name] = w
	}
	return out
}

// simFleet is the embedded simulated fleet to start.
type simFleet struct {
	cfg      sim.Config
	replicas int
	// prefill > 0 is the P/D topology: prefill engines of role prefill,
	// replicas − prefill of role decode.
	prefill int
	// tokenizer is the model directory of cfg.Tokenizer, which the pools
	// use too (tokenizer kind hf); "" for the simulator's rules.
	tokenizer string
	// mixed is the mixed topology: the replicas split between
	// mixedPools, whose accelerators and flavours replace cfg's.
	mixed bool
	// apart runs the replicas in `turnpike sim` processes of their own,
	// apart[i] of them in process i (the aggregated topology only).
	// Empty: in this process.
	apart []int
}

// fleet is the embedded fleet: one simulated fleet per pool, its
// replicas numbered across them in pool order (bench.Replicas).
type fleet struct {
	pools  []pools.PoolConfig
	fleets []*sim.Fleet
	// procs are the engine processes of a fleet apart (simFleet.apart)
	// and remote their engines, in order; fleets is then empty.
	procs     []*exec.Cmd
	remote    []engineReport
	stopProcs context.CancelFunc
	closeOnce sync.Once
}

// startFleet starts the engines of sf and the pool configs serving them.
func startFleet(ctx context.Context, sf simFleet) (*fleet, error) {
	type part struct {
		name, role string
		n          int
		// accelerator and flavor replace the config's when set.
		accelerator, flavor string
	}
	if len(sf.apart) > 0 {
		return startFleetApart(ctx, sf)
	}
	parts := []part{{name: "sim", role: sim.RoleBoth, n: sf.replicas}}
	if sf.mixed {
		parts = nil
		for i, mp := range mixedPools {
			n := sf.replicas / len(mixedPools)
			if i < sf.replicas%len(mixedPools) {
				n++
			}
			parts = append(parts, part{name: mp.name, role: sim.RoleBoth, n: n, accelerator: mp.accelerator, flavor: mp.flavor})
		}
	}
	if sf.prefill > 0 {
		if sf.prefill >= sf.replicas {
			return nil, fmt.Errorf("sim topology pd: %d prefill replicas leave none of %d to decode", sf.prefill, sf.replicas)
		}
		parts = []part{{name: "prefill", role: sim.RolePrefill, n: sf.prefill}, {name: "decode", role: sim.RoleDecode, n: sf.replicas - sf.prefill}}
	}
	f := &fleet{}
	for _, p := range parts {
		cfg := sf.cfg
		cfg.Role = p.role
		if len(parts) > 1 {
			cfg.Name = p.name
		}
		if p.accelerator != "" {
			cfg.Accelerator, cfg.Flavor = p.accelerator, p.flavor
		}
		sfl, err := sim.StartFleet(ctx, p.n, cfg, "127.0.0.1", 0)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.fleets = append(f.fleets, sfl)
		pc := simPool(&cfg, sfl, p.name, p.role)
		if cfg.Flavor == sim.FlavorSGLang && p.role == sim.RolePrefill {
			// A simulated SGLang prefill engine serves its bootstrap
			// endpoint on its own port (sim.BootstrapPath).
			for i := range pc.Endpoints {
				pc.Endpoints[i].BootstrapPort = urlPort(pc.Endpoints[i].URL)
			}
		}
		if sf.tokenizer != "" {
			pc.Tokenizer = pools.TokenizerConfig{Kind: pools.TokenizerHF, Path: sf.tokenizer}
		}
		f.pools = append(f.pools, pc)
	}
	return f, nil
}

// urlPort is the port of a base URL, 0 when it names none.
func urlPort(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	port, _ := strconv.Atoi(u.Port())
	return port
}

// startFleetApart starts sf's replicas in `turnpike sim` processes of
// this binary, sf.apart[i] in process i, and the one pool serving them.
// A process is a machine of its own to the Go scheduler: engines in
// different processes take no scheduler time from each other's requests,
// as engines on different accelerators do not.
func startFleetApart(ctx context.Context, sf simFleet) (_ *fleet, err error) {
	if sf.prefill > 0 || sf.mixed || sf.cfg.KVSharedBlocks > 0 {
		// A shared tier is one store in one process.
		return nil, fmt.Errorf("sim: only the aggregated topology without a shared KV tier runs its engines apart")
	}
	c := &sf.cfg
	flags := []string{
		"--flavor", c.Flavor, "--accelerator", c.Accelerator, "--model", c.Model, "--served-model", c.ServedModelName,
		"--time-scale", strconv.FormatFloat(c.TimeScale, 'g', -1, 64), "--num-blocks", strconv.Itoa(c.NumBlocks),
		"--kv-cpu-blocks", strconv.Itoa(c.KVCPUBlocks), "--kv-disk-blocks", strconv.Itoa(c.KVDiskBlocks),
		"--scheduling-policy", c.SchedulingPolicy,
	}
	if sf.tokenizer != "" {
		flags = append(flags, "--tokenizer", sf.tokenizer)
	}
	if c.KVEventsAddr != "" {
		flags = append(flags, "--kv-events")
	}
	// The processes outlive ctx until Close, which stops them.
	procs, stop := context.WithCancel(context.WithoutCancel(ctx))
	f := &fleet{stopProcs: stop}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	first := 0
	for _, n := range sf.apart {
		args := append([]string{"sim", "-n", strconv.Itoa(n), "--first-engine", strconv.Itoa(first), "--base-port", "0", "--report-json"}, flags...)
		first += n
		cmd, err := child(procs, os.Stderr, 10*time.Second, args...)
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("sim: engine process: %w", err)
		}
		f.procs = append(f.procs, cmd)
		var engines []engineReport
		line, err := bufio.NewReader(out).ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &engines)
		}
		if err != nil || len(engines) != n {
			return nil, fmt.Errorf("sim: engine process: reading its %d engines: %v", n, err)
		}
		f.remote = append(f.remote, engines...)
	}
	pc := simPoolOf(&sf.cfg, "sim", sim.RoleBoth)
	for _, e := range f.remote {
		pc.Endpoints = append(pc.Endpoints, pools.EndpointConfig{URL: e.URL, KVEvents: e.KVEvents})
	}
	if sf.tokenizer != "" {
		pc.Tokenizer = pools.TokenizerConfig{Kind: pools.TokenizerHF, Path: sf.tokenizer}
	}
	f.pools = []pools.PoolConfig{pc}
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	return f, nil
}

// kvCapacityTokens is the fleet's KV cache in tokens, every replica's.
func (f *fleet) kvCapacityTokens() int {
	n := 0
	for _, e := range f.remote {
		n += e.KVCapacityTokens
	}
	for _, e := range f.Engines() {
		n += e.NumBlocks() * e.Config().BlockSize
	}
	return n
}

// URLs are every replica's base URL.
func (f *fleet) URLs() []string {
	var out []string
	for _, e := range f.remote {
		out = append(out, e.URL)
	}
	for _, sf := range f.fleets {
		out = append(out, sf.URLs...)
	}
	return out
}

// Engines are every replica's engine.
func (f *fleet) Engines() []*sim.Engine {
	var out []*sim.Engine
	for _, sf := range f.fleets {
		out = append(out, sf.Engines...)
	}
	return out
}

func (f *fleet) locate(i int) (*sim.Fleet, int, error) {
	for _, sf := range f.fleets {
		if i < len(sf.URLs) {
			return sf, i, nil
		}
		i -= len(sf.URLs)
	}
	if len(f.remote) > 0 {
		return nil, 0, fmt.Errorf("sim: replica %d runs in a process of its own", i)
	}
	return nil, 0, fmt.Errorf("sim: no replica %d", i)
}

// Kill stops replica i.
func (f *fleet) Kill(i int) error {
	sf, j, err := f.locate(i)
	if err != nil {
		return err
	}
	return sf.Kill(j)
}

// Restart starts replica i again.
func (f *fleet) Restart(i int) error {
	sf, j, err := f.locate(i)
	if err != nil {
		return err
	}
	return sf.Restart(j)
}

// Close stops every replica.
func (f *fleet) Close() error {
	var errs []error
	for _, sf := range f.fleets {
		errs = append(errs, sf.Close())
	}
	f.closeOnce.Do(func() {
		if f.stopProcs == nil {
			return
		}
		f.stopProcs()
		for _, cmd := range f.procs {
			// Interrupted, it exits with status 0, which Wait reports as
			// the cancellation; killed, with an error that says so.
			if err := cmd.Wait(); err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("sim: engine process: %w", err))
			}
		}
	})
	return errors.Join(errs...)
}
