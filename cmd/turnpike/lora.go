package main

import (
	"flag"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
)

// loraFlags shape the embedded fleet of the lora workload.
type loraFlags struct {
	// slots is each engine's max_lora; adapterMiB each adapter's size.
	slots, adapterMiB int
}

// registerLoRAFlags adds the lora workload's flags.
func registerLoRAFlags(fs *flag.FlagSet, cfg *bench.LoRAConfig, lf *loraFlags) {
	fs.IntVar(&cfg.Adapters, "lora-adapters", bench.DefaultLoRAAdapters, "lora: adapters of the served model the sessions ask for")
	fs.Float64Var(&cfg.Zipf, "lora-zipf", bench.DefaultLoRAZipf, "lora: popularity exponent; a session asks for adapter i with weight 1/(i+1)^s")
	fs.IntVar(&lf.slots, "lora-slots", 4, "lora: adapter slots of each embedded engine (vLLM's --max-loras)")
	fs.IntVar(&lf.adapterMiB, "lora-adapter-mib", sim.DefaultLoRASizeBytes>>20, "lora: each adapter's size in MiB; it loads at 1 GB/s of the simulated clock")
}

// loraFleet gives the embedded engines the workload's adapters, slots
// and runtime loading (a request for an adapter not loaded loads it, as
// vLLM with a LoRA resolver does), so that every policy is served; the
// gateway's pools learn the adapters from the same config.
func loraFleet(cfg *sim.Config, lc bench.LoRAConfig, lf loraFlags) {
	cfg.MaxLoRAs = lf.slots
	cfg.RuntimeLoRALoading = true
	cfg.LoRAAdapters = make([]sim.LoRAAdapter, lc.Adapters)
	for i := range cfg.LoRAAdapters {
		cfg.LoRAAdapters[i] = sim.LoRAAdapter{Name: bench.AdapterName(i), SizeBytes: int64(lf.adapterMiB) << 20}
	}
}
