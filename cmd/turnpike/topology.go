package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
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
}

// fleet is the embedded fleet: one simulated fleet per pool, its
// replicas numbered across them in pool order (bench.Replicas).
type fleet struct {
	pools  []pools.PoolConfig
	fleets []*sim.Fleet
}

// startFleet starts the engines of sf and the pool configs serving them.
func startFleet(ctx context.Context, sf simFleet) (*fleet, error) {
	type part struct {
		name, role string
		n          int
		// accelerator and flavor replace the config's when set.
		accelerator, flavor string
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

// URLs are every replica's base URL.
func (f *fleet) URLs() []string {
	var out []string
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
	return errors.Join(errs...)
}
