package main

import (
	"flag"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/bench/embedded"
)

// registerLoRAFlags adds the lora workload's flags.
func registerLoRAFlags(fs *flag.FlagSet, cfg *bench.LoRAConfig, lf *embedded.LoRAFleet) {
	fs.IntVar(&cfg.Adapters, "lora-adapters", bench.DefaultLoRAAdapters, "lora: adapters of the served model the sessions ask for")
	fs.Float64Var(&cfg.Zipf, "lora-zipf", bench.DefaultLoRAZipf, "lora: popularity exponent; a session asks for adapter i with weight 1/(i+1)^s")
	fs.IntVar(&lf.Slots, "lora-slots", 4, "lora: adapter slots of each embedded engine (vLLM's --max-loras)")
	fs.IntVar(&lf.AdapterMiB, "lora-adapter-mib", sim.DefaultLoRASizeBytes>>20, "lora: each adapter's size in MiB; it loads at 1 GB/s of the simulated clock")
}
