package accelerators

import (
	"slices"
	"strings"
)

// Accelerator is the profile of one accelerator chip (or the unit an engine
// replica runs on).
type Accelerator struct {
	// Name is the catalog key, lower case, e.g. "h100".
	Name string
	// HBMBytes is the high-bandwidth memory capacity in bytes.
	HBMBytes float64
	// PeakFLOPS is the peak dense bf16 throughput, FLOP/s.
	PeakFLOPS float64
	// HBMBandwidth is bytes per second.
	HBMBandwidth float64
	// HostLinkBandwidth is the host (PCIe or equivalent) link, bytes per
	// second in one direction. It prices moving KV blocks to and from host
	// memory.
	HostLinkBandwidth float64
	// DollarsPerHour is an on-demand list price per chip.
	DollarsPerHour float64
}

// Model is the profile of one open model, from its published config.
type Model struct {
	// Name is the catalog key, lower case, e.g. "llama-3.1-8b".
	Name string
	// Params and ActiveParams are total and per-token active parameters.
	// They differ only for mixture-of-experts models.
	Params, ActiveParams float64
	// Layers is num_hidden_layers, KVHeads num_key_value_heads and HeadDim
	// the attention head dimension.
	Layers, KVHeads, HeadDim int
	// BytesPerParam is 2 for bf16 weights. The KV cache uses the same width.
	BytesPerParam float64
	// ContextLength is the maximum sequence length in tokens.
	ContextLength int
}

// Decimal units, as vendor datasheets quote them.
const (
	gb    = 1e9
	tb    = 1e12
	tflop = 1e12
)

// The accelerator catalog. Peak FLOP/s are dense (no structured sparsity)
// bf16 tensor throughput. Prices are approximate on-demand cloud list prices
// per chip-hour (mid 2025) and only serve to compare cost per token; they
// vary by provider and region.
var accelerators = map[string]Accelerator{
	// NVIDIA H100 Tensor Core GPU datasheet, SXM5 variant: 80 GB HBM3,
	// 3.35 TB/s, 989 TFLOPS bf16 dense (1,979 with sparsity); PCIe Gen5 x16
	// host link, 64 GB/s per direction.
	"h100": {Name: "h100", HBMBytes: 80 * gb, PeakFLOPS: 989 * tflop, HBMBandwidth: 3.35 * tb,
		HostLinkBandwidth: 64 * gb, DollarsPerHour: 4.00},
	// NVIDIA H200 Tensor Core GPU datasheet, SXM variant: 141 GB HBM3e,
	// 4.8 TB/s, same Hopper compute as H100; PCIe Gen5 x16.
	"h200": {Name: "h200", HBMBytes: 141 * gb, PeakFLOPS: 989 * tflop, HBMBandwidth: 4.8 * tb,
		HostLinkBandwidth: 64 * gb, DollarsPerHour: 5.00},
	// NVIDIA HGX B200 datasheet, per GPU: 180 GB HBM3e, 8 TB/s, 2.25 PFLOPS
	// bf16 dense (4.5 with sparsity); PCIe Gen6 x16, 128 GB/s per direction.
	"b200": {Name: "b200", HBMBytes: 180 * gb, PeakFLOPS: 2250 * tflop, HBMBandwidth: 8 * tb,
		HostLinkBandwidth: 128 * gb, DollarsPerHour: 7.00},
	// AMD Instinct MI300X accelerator datasheet: 192 GB HBM3, 5.3 TB/s,
	// 1,307.4 TFLOPS bf16 dense; PCIe Gen5 x16.
	"mi300x": {Name: "mi300x", HBMBytes: 192 * gb, PeakFLOPS: 1307.4 * tflop, HBMBandwidth: 5.3 * tb,
		HostLinkBandwidth: 64 * gb, DollarsPerHour: 3.50},
	// Google Cloud TPU v6e (Trillium) system architecture page: 32 GB HBM,
	// 1,640 GB/s, 918 TFLOPS bf16 per chip; list price about $2.70 per
	// chip-hour. The host link is not published: assumed PCIe Gen4 x16.
	"tpu-v6e": {Name: "tpu-v6e", HBMBytes: 32 * gb, PeakFLOPS: 918 * tflop, HBMBandwidth: 1.64 * tb,
		HostLinkBandwidth: 32 * gb, DollarsPerHour: 2.70},
	// Google Cloud TPU7x (Ironwood) announcement and system architecture
	// page: 192 GB HBM3E, 7.37 TB/s, 4,614 TFLOPS FP8 per chip; bf16 taken
	// as half the FP8 rate. Host link and price are estimates (PCIe Gen5
	// x16; no public on-demand price at the time of writing).
	"tpu7x": {Name: "tpu7x", HBMBytes: 192 * gb, PeakFLOPS: 2307 * tflop, HBMBandwidth: 7.37 * tb,
		HostLinkBandwidth: 64 * gb, DollarsPerHour: 8.00},
}

// The model catalog, from each model's published config.json (layers =
// num_hidden_layers, KV heads = num_key_value_heads, head dim = head_dim or
// hidden_size/num_attention_heads, context = max_position_embeddings) and
// the parameter counts on its model card.
var models = map[string]Model{
	// Llama 3.1 8B: hidden 4096, 32 heads, 8 KV heads.
	"llama-3.1-8b": {Name: "llama-3.1-8b", Params: 8.03e9, ActiveParams: 8.03e9,
		Layers: 32, KVHeads: 8, HeadDim: 128, BytesPerParam: 2, ContextLength: 131072},
	// Llama 3.1 70B: hidden 8192, 64 heads, 8 KV heads.
	"llama-3.1-70b": {Name: "llama-3.1-70b", Params: 70.6e9, ActiveParams: 70.6e9,
		Layers: 80, KVHeads: 8, HeadDim: 128, BytesPerParam: 2, ContextLength: 131072},
	// Qwen3-32B: 64 query heads, 8 KV heads, head_dim 128; 32,768 native
	// context, max_position_embeddings 40,960.
	"qwen3-32b": {Name: "qwen3-32b", Params: 32.8e9, ActiveParams: 32.8e9,
		Layers: 64, KVHeads: 8, HeadDim: 128, BytesPerParam: 2, ContextLength: 40960},
	// Qwen3-30B-A3B: mixture of experts, 128 experts with 8 active per
	// token; 30.5B total, 3.3B active; 4 KV heads, head_dim 128.
	"qwen3-30b-a3b": {Name: "qwen3-30b-a3b", Params: 30.5e9, ActiveParams: 3.3e9,
		Layers: 48, KVHeads: 4, HeadDim: 128, BytesPerParam: 2, ContextLength: 40960},
}

// LookupAccelerator finds an accelerator by catalog name (case-insensitive).
func LookupAccelerator(name string) (Accelerator, bool) {
	a, ok := accelerators[strings.ToLower(name)]
	return a, ok
}

// LookupModel finds a model profile by name (case-insensitive).
func LookupModel(name string) (Model, bool) {
	m, ok := models[strings.ToLower(name)]
	return m, ok
}

// AcceleratorNames lists the catalog's accelerator names, sorted.
func AcceleratorNames() []string {
	var names []string
	for n := range accelerators {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ModelNames lists the catalog's model profile names, sorted.
func ModelNames() []string {
	var names []string
	for n := range models {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
