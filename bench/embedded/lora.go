package embedded

import (
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench"
)

// LoRAFleet shapes the embedded fleet of the lora workload.
type LoRAFleet struct {
	// Slots is each engine's max_lora; AdapterMiB each adapter's size.
	Slots, AdapterMiB int
}

// apply gives the embedded engines the workload's adapters, slots
// and runtime loading (a request for an adapter not loaded loads it, as
// vLLM with a LoRA resolver does), so that every policy is served; the
// gateway's pools learn the adapters from the same config.
func (lf LoRAFleet) apply(cfg *sim.Config, lc bench.LoRAConfig) {
	cfg.MaxLoRAs = lf.Slots
	cfg.RuntimeLoRALoading = true
	cfg.LoRAAdapters = make([]sim.LoRAAdapter, lc.Adapters)
	for i := range cfg.LoRAAdapters {
		cfg.LoRAAdapters[i] = sim.LoRAAdapter{Name: bench.AdapterName(i), SizeBytes: int64(lf.AdapterMiB) << 20}
	}
}
