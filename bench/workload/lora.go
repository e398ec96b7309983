package workload

import (
	"fmt"
	"math"
)

// WorkloadLoRA: agentic sessions spread over LoRA adapters of the served
// model by Zipf popularity, on a fleet with fewer adapter slots than
// adapters (bench/scenario/lora).
const WorkloadLoRA = "lora"

// Defaults of the lora workload.
const (
	DefaultLoRAAdapters = 32
	DefaultLoRAZipf     = 1.1
)

// LoRAConfig shapes the lora workload: the agentic sessions (Agentic),
// each asking for one adapter.
type LoRAConfig struct {
	// Adapters is how many adapters the sessions ask for, named
	// AdapterName(0), AdapterName(1), …. Default 32.
	Adapters int `json:"adapters" yaml:"adapters"`
	// Zipf is the popularity exponent: a session asks for adapter i with
	// weight 1/(i+1)^Zipf. Default 1.1; 0 is taken as the default.
	Zipf float64 `json:"zipf" yaml:"zipf"`
}

func (c *LoRAConfig) ensureDefaults() {
	setDefault(&c.Adapters, DefaultLoRAAdapters)
	setDefault(&c.Zipf, DefaultLoRAZipf)
}

func (c *LoRAConfig) validate(bad func(string, ...any)) {
	if c.Adapters < 1 {
		bad("lora.adapters %d: want >= 1", c.Adapters)
	}
	if !(c.Zipf > 0) || math.IsInf(c.Zipf, 0) {
		bad("lora.zipf %v: want > 0", c.Zipf)
	}
}

// AdapterName is the name of the lora workload's adapter i.
func AdapterName(i int) string { return fmt.Sprintf("adapter-%02d", i) }

// AssignAdapters gives each session an adapter, drawn by Zipf popularity
// from the run's seed: the same sessions ask for the same adapters on
// every run of a seed.
func AssignAdapters(cfg Config, sessions []Session) {
	lc := cfg.LoRA
	cum := make([]float64, lc.Adapters)
	total := 0.0
	for i := range cum {
		total += 1 / math.Pow(float64(i+1), lc.Zipf)
		cum[i] = total
	}
	g := Rand(Mix(uint64(cfg.Seed), 0x10a))
	for i := range sessions {
		u := float64(g.Next()>>11) / (1 << 53) * total
		k := 0
		for k < len(cum)-1 && cum[k] <= u {
			k++
		}
		sessions[i].Model = AdapterName(k)
	}
}
