package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
)

// Engine flavours: whose metric names the engine exports.
const (
	FlavorVLLM   = "vllm"
	FlavorSGLang = "sglang"
	// FlavorVLLMTPU is vLLM on TPU as images built on vLLM releases before
	// the rename of its KV cache series export it: vLLM's names, with KV
	// usage and prefix-cache counters spelt vllm:gpu_cache_usage_perc and
	// vllm:gpu_prefix_cache_{queries,hits}_total.
	FlavorVLLMTPU = "vllm-tpu"
)

// Roles of an engine in prefill/decode disaggregation, as vLLM's
// kv_role: a prefill engine (kv_producer) holds the KV of a request sent
// with kv_transfer_params do_remote_decode for a decoder to pull; a decode
// engine (kv_consumer) pulls it instead of recomputing; both does either,
// and every role still serves whole requests.
const (
	RoleBoth    = "both"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Scheduling policies, as vLLM's --scheduling-policy.
const (
	SchedulingFCFS     = "fcfs"
	SchedulingPriority = "priority"
)

// Defaults applied by EnsureDefaults.
const (
	DefaultName                 = "sim"
	DefaultFlavor               = FlavorVLLM
	DefaultAccelerator          = "h100"
	DefaultModel                = "llama-3.1-8b"
	DefaultMaxNumSeqs           = 256
	DefaultMaxBatchedTokens     = 8192
	DefaultBlockSize            = 16
	DefaultGPUMemoryUtilization = 0.9
	DefaultMaxTokens            = 256
	DefaultDropAfter            = 4
	DefaultKVEventsTopic        = "kv-events"
	DefaultRole                 = RoleBoth
	// DefaultKVLease is how long a prefill engine holds a request's KV
	// blocks for a decoder to pull, in simulated time.
	DefaultKVLease = 30 * time.Second
	// DefaultBootstrapTimeout is how long an SGLang decode engine waits
	// for a bootstrap room's KV (Config.BootstrapTimeout).
	DefaultBootstrapTimeout = 30 * time.Second
	// DefaultKVDiskBandwidth is the bytes per second KV loads from local
	// disk at: an NVMe PCIe Gen4 x4 drive's sequential read, 7 GB/s.
	DefaultKVDiskBandwidth = 7e9
	// DefaultKVSharedBandwidth is the bytes per second KV loads from the
	// pool's shared store at: a 50 Gb/s share of the storage network.
	DefaultKVSharedBandwidth = 6.25e9
)

// DefaultErrorStatuses is the status drawn by ErrorRate when
// ErrorStatuses is empty.
var DefaultErrorStatuses = []int{503}

// Config describes one simulated engine. The zero value plus
// EnsureDefaults is a vLLM serving llama-3.1-8b on an H100, instantly.
type Config struct {
	// Name identifies the engine in logs and its vLLM engine id. Default
	// "sim".
	Name string
	// Flavor is "vllm" (default), "vllm-tpu" or "sglang": the metric names
	// exported.
	Flavor string
	// Accelerator is a catalog name (accelerators.AcceleratorNames).
	// Default "h100".
	Accelerator string
	// Model is a catalog model profile name. Default "llama-3.1-8b".
	Model string
	// ServedModelName is the model id clients send and /v1/models lists.
	// Default: Model.
	ServedModelName string
	// MaxModelLen caps prompt plus output tokens. 0 means the model
	// profile's context length.
	MaxModelLen int
	// TimeScale is wall seconds per simulated second: 1 runs in real time,
	// 0.1 ten times faster, 0 (the zero value) as fast as the CPU allows,
	// for unit tests. Metrics always report simulated seconds.
	TimeScale float64
	// MaxNumSeqs is the most sequences running at once. Default 256.
	MaxNumSeqs int
	// MaxBatchedTokens is the token budget of one step (prefill chunks plus
	// one token per decoding sequence). Default 8192.
	MaxBatchedTokens int
	// SchedulingPolicy is vLLM's --scheduling-policy: SchedulingFCFS
	// (default) admits waiting requests in arrival order; SchedulingPriority
	// by each request's priority field (lower first), then arrival, and
	// preempts the lowest-priority running request when the KV cache
	// cannot grow.
	SchedulingPolicy string
	// BlockSize is tokens per KV cache block. Default 16.
	BlockSize int
	// NumBlocks overrides the KV cache size in blocks. 0 means sized from
	// the accelerator's HBM × GPUMemoryUtilization minus the weights.
	NumBlocks int
	// GPUMemoryUtilization is the fraction of HBM the engine may use
	// (0, 1]. Default 0.9.
	GPUMemoryUtilization float64
	// DefaultMaxTokens is the output cap when a request sets none: answers
	// are drawn no longer, and one that reaches it ends as the model's own
	// stop, not with finish reason "length" (the client set no limit).
	// Default 256.
	DefaultMaxTokens int
	// Reasoning makes the model a reasoning one: each chat answer starts
	// with a short thinking text, within the answer's max_tokens, streamed
	// as reasoning_content deltas before the content and counted in
	// usage's completion_tokens_details.reasoning_tokens, as vLLM serves a
	// model with a reasoning parser. The thinking fills KV blocks after the
	// prompt, so a follow-up turn that carries only the content hits the
	// cache up to the prompt, as with models whose chat templates drop
	// past thinking. Completions are unchanged. Default false.
	Reasoning bool

	// Tokenizer, when set, is the model's own chat template and tokenizer,
	// which chat prompts are rendered and every prompt tokenized with
	// instead of RenderChat and Tokenize (see ChatTokenizer). Nil keeps
	// the documented rules.
	Tokenizer ChatTokenizer

	// Role is "both" (default), "prefill" or "decode": which side of a
	// prefill/decode split the engine takes (see RoleBoth).
	Role string
	// KVLease is how long, in simulated time, a prefill engine holds the
	// blocks of a do_remote_decode request for a decoder to pull; they
	// are freed when pulled or when the lease runs out. Default 30s.
	KVLease time.Duration
	// BootstrapTimeout is how long, in simulated time, an SGLang-flavoured
	// decode engine given bootstrap fields waits for the bootstrap room's
	// KV at its prefill engine before refusing the request. Default 30s.
	BootstrapTimeout time.Duration
	// KVLinkBandwidth is the bytes per second a decode engine pulls
	// remote KV at. 0 means the accelerator's host link: GPUDirect RDMA
	// (NIXL's path) goes through the NIC on that link.
	KVLinkBandwidth float64
	// AdvertiseHost, when set, is the host a prefill engine names as
	// remote_host; otherwise the host the request was sent to.
	AdvertiseHost string

	// KV tiers below HBM. A block evicted from HBM moves to the CPU tier,
	// from there to disk, from the last of them to the shared store; a
	// prefix hit in a lower tier loads at that tier's bandwidth instead of
	// being recomputed. KV events name the tier as medium (MediumCPU, ...).
	// Zero blocks means no such tier, the default.

	// KVCPUBlocks is the host-memory tier's size in blocks; it loads at
	// the accelerator's host link bandwidth.
	KVCPUBlocks int
	// KVDiskBlocks is the local disk tier's size in blocks.
	KVDiskBlocks int
	// KVDiskBandwidth is the disk tier's load bandwidth, bytes per second.
	// Default DefaultKVDiskBandwidth.
	KVDiskBandwidth float64
	// KVSharedBlocks sizes the store shared by the engines of a fleet
	// (StartFleet creates it) when SharedKV is nil.
	KVSharedBlocks int
	// KVSharedBandwidth is the shared store's load bandwidth, bytes per
	// second. Default DefaultKVSharedBandwidth.
	KVSharedBandwidth float64
	// SharedKV is the pool's shared store; engines given the same one
	// share it. Nil means none unless a fleet creates one.
	SharedKV *SharedKV

	// Fault injection, drawn per request from the engine's seeded random
	// source; the x-sim-fault header forces one per request. All rates are
	// in [0, 1]; 0 disables.

	// ErrorRate is the fraction of requests answered with an error status
	// drawn from ErrorStatuses (default [503]).
	ErrorRate     float64
	ErrorStatuses []int
	// LatencyRate is the fraction of requests delayed by Latency (wall
	// clock, not scaled) before they reach the engine.
	LatencyRate float64
	Latency     time.Duration
	// HangRate is the fraction of requests that never answer until the
	// client goes away.
	HangRate float64
	// DropRate is the fraction of streams cut abruptly after DropAfter
	// chunks (default 4), with no [DONE].
	DropRate  float64
	DropAfter int

	// LoRA adapters, as vLLM serves them with --enable-lora. MaxLoRAs 0
	// (the default) serves none.

	// MaxLoRAs is the adapter slots, vLLM's --max-loras: how many
	// adapters are loaded at once. Loading one more unloads the least
	// recently used one no request uses.
	MaxLoRAs int
	// LoRAAdapters are the adapters the engine can load: by a request
	// that names one when RuntimeLoRALoading is on, by POST
	// /v1/load_lora_adapter, or at start (Preload).
	LoRAAdapters []LoRAAdapter
	// LoRALoadBandwidth is the bytes per second an adapter loads at.
	// Default DefaultLoRALoadBandwidth.
	LoRALoadBandwidth float64
	// RuntimeLoRALoading loads a known adapter a request names when it is
	// not loaded, the request waiting on the load (vLLM with
	// VLLM_ALLOW_RUNTIME_LORA_UPDATING and a LoRA resolver). False: such
	// a request is answered 404, as vLLM answers a model it does not
	// serve.
	RuntimeLoRALoading bool

	// KVEventsAddr, when set, is the ZMQ endpoint the engine binds a PUB
	// socket on for vLLM KV events, e.g. "tcp://127.0.0.1:5557" (port 0
	// picks a free one; see Engine.KVEventsAddr).
	KVEventsAddr string
	// KVEventsTopic is the first frame of every event message. Default
	// "kv-events".
	KVEventsTopic string
	// Seed varies generated text and fault draws; engines with the same
	// Seed answer the same prompt identically.
	Seed uint64
}

// EnsureDefaults fills zero fields with their defaults and returns cfg.
func (cfg *Config) EnsureDefaults() *Config {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Flavor == "" {
		cfg.Flavor = DefaultFlavor
	}
	if cfg.Accelerator == "" {
		cfg.Accelerator = DefaultAccelerator
	}
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	if cfg.ServedModelName == "" {
		cfg.ServedModelName = cfg.Model
	}
	if cfg.MaxNumSeqs == 0 {
		cfg.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if cfg.SchedulingPolicy == "" {
		cfg.SchedulingPolicy = SchedulingFCFS
	}
	if cfg.MaxBatchedTokens == 0 {
		cfg.MaxBatchedTokens = DefaultMaxBatchedTokens
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = DefaultBlockSize
	}
	if cfg.GPUMemoryUtilization == 0 {
		cfg.GPUMemoryUtilization = DefaultGPUMemoryUtilization
	}
	if cfg.DefaultMaxTokens == 0 {
		cfg.DefaultMaxTokens = DefaultMaxTokens
	}
	if len(cfg.ErrorStatuses) == 0 {
		cfg.ErrorStatuses = DefaultErrorStatuses
	}
	if cfg.DropAfter == 0 {
		cfg.DropAfter = DefaultDropAfter
	}
	if cfg.KVEventsTopic == "" {
		cfg.KVEventsTopic = DefaultKVEventsTopic
	}
	if cfg.Role == "" {
		cfg.Role = DefaultRole
	}
	if cfg.KVLease == 0 {
		cfg.KVLease = DefaultKVLease
	}
	if cfg.BootstrapTimeout == 0 {
		cfg.BootstrapTimeout = DefaultBootstrapTimeout
	}
	if cfg.KVDiskBandwidth == 0 {
		cfg.KVDiskBandwidth = DefaultKVDiskBandwidth
	}
	if cfg.KVSharedBandwidth == 0 {
		cfg.KVSharedBandwidth = DefaultKVSharedBandwidth
	}
	if cfg.LoRALoadBandwidth == 0 {
		cfg.LoRALoadBandwidth = DefaultLoRALoadBandwidth
	}
	if len(cfg.LoRAAdapters) > 0 {
		adapters := make([]LoRAAdapter, len(cfg.LoRAAdapters))
		for i, a := range cfg.LoRAAdapters {
			if a.Path == "" {
				a.Path = "/adapters/" + a.Name
			}
			if a.SizeBytes == 0 {
				a.SizeBytes = DefaultLoRASizeBytes
			}
			adapters[i] = a
		}
		cfg.LoRAAdapters = adapters
	}
	return cfg
}

// Validate reports every problem of cfg at once. Call it after
// EnsureDefaults.
func (cfg *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("sim: "+format, args...))
	}
	if _, ok := flavorMetrics[cfg.Flavor]; !ok {
		bad("flavor %q is not %q, %q or %q", cfg.Flavor, FlavorVLLM, FlavorVLLMTPU, FlavorSGLang)
	}
	switch cfg.Role {
	case RoleBoth, RolePrefill, RoleDecode:
	default:
		bad("role %q is not %q, %q or %q", cfg.Role, RoleBoth, RolePrefill, RoleDecode)
	}
	switch cfg.SchedulingPolicy {
	case SchedulingFCFS, SchedulingPriority:
	default:
		bad("scheduling policy %q is not %q or %q", cfg.SchedulingPolicy, SchedulingFCFS, SchedulingPriority)
	}
	if cfg.BootstrapTimeout < 0 {
		bad("bootstrap timeout %v is negative", cfg.BootstrapTimeout)
	}
	if cfg.KVLease < 0 {
		bad("kv lease %v is negative", cfg.KVLease)
	}
	if cfg.KVLinkBandwidth < 0 {
		bad("kv link bandwidth %v is negative", cfg.KVLinkBandwidth)
	}
	for _, t := range []struct {
		name   string
		blocks int
		bw     float64
	}{{"cpu", cfg.KVCPUBlocks, 1}, {"disk", cfg.KVDiskBlocks, cfg.KVDiskBandwidth}, {"shared", cfg.KVSharedBlocks, cfg.KVSharedBandwidth}} {
		if t.blocks < 0 {
			bad("kv %s blocks %d < 0", t.name, t.blocks)
		}
		if t.bw <= 0 {
			bad("kv %s bandwidth %v is not positive", t.name, t.bw)
		}
	}
	acc, accOK := accelerators.LookupAccelerator(cfg.Accelerator)
	if !accOK {
		bad("unknown accelerator %q (have %v)", cfg.Accelerator, accelerators.AcceleratorNames())
	}
	model, modelOK := accelerators.LookupModel(cfg.Model)
	if !modelOK {
		bad("unknown model %q (have %v)", cfg.Model, accelerators.ModelNames())
	}
	if cfg.TimeScale < 0 {
		bad("time scale %v is negative", cfg.TimeScale)
	}
	if cfg.MaxNumSeqs < 1 {
		bad("max num seqs %d < 1", cfg.MaxNumSeqs)
	}
	if cfg.BlockSize < 1 {
		bad("block size %d < 1", cfg.BlockSize)
	}
	if cfg.MaxBatchedTokens < 1 {
		bad("max batched tokens %d < 1", cfg.MaxBatchedTokens)
	}
	if cfg.MaxModelLen < 0 {
		bad("max model len %d < 0", cfg.MaxModelLen)
	}
	if cfg.DefaultMaxTokens < 1 {
		bad("default max tokens %d < 1", cfg.DefaultMaxTokens)
	}
	if cfg.GPUMemoryUtilization <= 0 || cfg.GPUMemoryUtilization > 1 {
		bad("gpu memory utilization %v not in (0, 1]", cfg.GPUMemoryUtilization)
	}
	if cfg.NumBlocks < 0 {
		bad("num blocks %d < 0", cfg.NumBlocks)
	}
	if cfg.NumBlocks == 0 && accOK && modelOK && cfg.BlockSize > 0 &&
		accelerators.KVBlocks(acc, model, cfg.BlockSize, cfg.GPUMemoryUtilization) == 0 {
		bad("model %s does not fit on %s at memory utilization %v", cfg.Model, cfg.Accelerator, cfg.GPUMemoryUtilization)
	}
	rates := []struct {
		name string
		rate float64
	}{{"error", cfg.ErrorRate}, {"latency", cfg.LatencyRate}, {"hang", cfg.HangRate}, {"drop", cfg.DropRate}}
	for _, r := range rates {
		if r.rate < 0 || r.rate > 1 {
			bad("%s rate %v not in [0, 1]", r.name, r.rate)
		}
	}
	for _, s := range cfg.ErrorStatuses {
		if s < 400 || s > 599 {
			bad("error status %d is not a 4xx or 5xx", s)
		}
	}
	if cfg.Latency < 0 {
		bad("latency %v is negative", cfg.Latency)
	}
	if cfg.DropAfter < 0 {
		bad("drop after %d chunks is negative", cfg.DropAfter)
	}
	if cfg.MaxLoRAs < 0 {
		bad("max loras %d < 0", cfg.MaxLoRAs)
	}
	if cfg.MaxLoRAs == 0 && (len(cfg.LoRAAdapters) > 0 || cfg.RuntimeLoRALoading) {
		bad("lora adapters or runtime lora loading without max loras")
	}
	if cfg.LoRALoadBandwidth <= 0 {
		bad("lora load bandwidth %v is not positive", cfg.LoRALoadBandwidth)
	}
	seen := map[string]bool{}
	for _, a := range cfg.LoRAAdapters {
		switch {
		case a.Name == "" || a.Name == cfg.ServedModelName:
			bad("lora adapter name %q is empty or the served model's", a.Name)
		case seen[a.Name]:
			bad("lora adapter %q named twice", a.Name)
		case a.SizeBytes < 0:
			bad("lora adapter %q size %d < 0", a.Name, a.SizeBytes)
		}
		seen[a.Name] = true
	}
	return errors.Join(errs...)
}

// numBlocks is the KV cache size the config asks for.
func (cfg *Config) numBlocks(acc accelerators.Accelerator, model accelerators.Model) int {
	if cfg.NumBlocks > 0 {
		return cfg.NumBlocks
	}
	return accelerators.KVBlocks(acc, model, cfg.BlockSize, cfg.GPUMemoryUtilization)
}

// lowerTiers builds the engine's tiers below HBM.
func (cfg *Config) lowerTiers(acc accelerators.Accelerator, events *eventLog) lowerTiers {
	lt := lowerTiers{events: events, shared: cfg.SharedKV}
	if cfg.KVCPUBlocks > 0 {
		lt.local = append(lt.local, newBlockTier(MediumCPU, cfg.KVCPUBlocks, cfg.BlockSize, acc.HostLinkBandwidth))
	}
	if cfg.KVDiskBlocks > 0 {
		lt.local = append(lt.local, newBlockTier(MediumDisk, cfg.KVDiskBlocks, cfg.BlockSize, cfg.KVDiskBandwidth))
	}
	return lt
}

// maxModelLen is the context cap the engine enforces.
func (cfg *Config) maxModelLen(model accelerators.Model) int {
	if cfg.MaxModelLen > 0 {
		return cfg.MaxModelLen
	}
	return model.ContextLength
}
