package stack

import (
	"net/url"
	"strconv"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// SimPools are the pool configs that serve a started simulated fleet, a
// pool for each of its pools. tokenizerDir, when set, is the model
// directory the engines render and tokenize with, which the pools then
// use too (tokenizer kind hf).
func SimPools(f *sim.Fleets, tokenizerDir string) []pools.PoolConfig {
	var out []pools.PoolConfig
	for _, p := range f.Pools {
		pc := SimPool(&p.Config, p.Name, p.Role)
		for _, r := range p.Replicas {
			ep := pools.EndpointConfig{URL: r.URL, KVEvents: r.KVEvents}
			if p.Config.Flavor == sim.FlavorSGLang && p.Role == sim.RolePrefill {
				// A simulated SGLang prefill engine serves its bootstrap
				// endpoint on its own port (sim.BootstrapPath).
				ep.BootstrapPort = urlPort(r.URL)
			}
			pc.Endpoints = append(pc.Endpoints, ep)
		}
		if tokenizerDir != "" {
			pc.Tokenizer = pools.TokenizerConfig{Kind: pools.TokenizerHF, Path: tokenizerDir}
		}
		out = append(out, pc)
	}
	return out
}

// SimPool is the pool config, named name with role role ("" for both),
// of simulated engines configured by simCfg, without its endpoints.
func SimPool(simCfg *sim.Config, name, role string) pools.PoolConfig {
	return pools.PoolConfig{
		Name:         name,
		Engine:       simCfg.Flavor,
		Accelerator:  simCfg.Accelerator,
		Model:        simCfg.Model,
		ServedModels: []string{simCfg.ServedModelName},
		Role:         role,
		// The engines' policy, which the pool's config states.
		PriorityScheduling: simCfg.SchedulingPolicy == sim.SchedulingPriority,
		Adapters:           simAdapters(simCfg),
		MaxLoRA:            simCfg.MaxLoRAs,
	}
}

// simAdapters are the pool's adapters: the engines'.
func simAdapters(simCfg *sim.Config) []pools.AdapterConfig {
	var out []pools.AdapterConfig
	for _, a := range simCfg.LoRAAdapters {
		out = append(out, pools.AdapterConfig{Name: a.Name, Path: a.Path})
	}
	return out
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
