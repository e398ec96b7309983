package pools

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
)

// Engine flavours: which metric names an endpoint exports.
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	// EngineVLLMTPU is vLLM on TPU (the tpu-inference backend, "TorchTPU"
	// vLLM): vLLM's own engine core and metric names, read with the
	// spellings of releases before vLLM renamed its KV cache series
	// (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*) as a fallback,
	// since TPU images follow vLLM's releases with a lag.
	EngineVLLMTPU = "vllm-tpu"
)

// Roles of a pool in prefill/decode disaggregation.
const (
	RoleBoth    = "both"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
)

// Defaults for the fleet-wide knobs.
const (
	DefaultScrapeInterval  = 200 * time.Millisecond
	DefaultStaleAfter      = 1500 * time.Millisecond
	DefaultHealthInterval  = 2 * time.Second
	DefaultHealthFailures  = 3
	DefaultBreakerFailures = 5
	DefaultBreakerOpenFor  = 10 * time.Second
	DefaultRequestTimeout  = 10 * time.Minute
	DefaultConnectTimeout  = 3 * time.Second
	DefaultMaxRetries      = 2
	DefaultMaxMigrations   = 2
)

// PoolConfig describes one pool of endpoints in the config file.
type PoolConfig struct {
	// Name identifies the pool in metrics and the admin API. Required, unique.
	Name string `yaml:"name" json:"name"`
	// Engine is the metric flavour: "vllm" (default), "vllm-tpu" (vLLM on
	// TPU) or "sglang".
	Engine string `yaml:"engine" json:"engine"`
	// Accelerator is a catalog name (see accelerators.Accelerators). Optional;
	// used for capacity estimates when the engine does not report them.
	Accelerator string `yaml:"accelerator" json:"accelerator"`
	// Model is a model profile name (see accelerators.Models). Optional;
	// gives the context length and KV size when the engine does not.
	Model string `yaml:"model" json:"model"`
	// ServedModels are the model names clients ask for. Required.
	ServedModels []string `yaml:"servedModels" json:"servedModels"`
	// Role is "both" (default: whole requests), "decode" or "prefill".
	// For a model served by prefill and decode pools, the gateway sends a
	// long turn's prefill to a prefill endpoint and its decode, with the
	// KV transfer params the prefill answered, to a decode endpoint
	// (routing.pd). Decode endpoints also take whole requests; prefill
	// endpoints only prefill legs, so a model needs a both or decode pool.
	Role string `yaml:"role" json:"role"`
	// Lendable marks capacity that belongs to someone else (an RL
	// trainer's accelerators): the pool takes no traffic unless it is
	// lent (POST /admin/v1/pools/{name}/lend), and while lent only turns
	// of the background band (background responses, batches, the async
	// intake, the flex tier). Default false. A lendable pool has role
	// both.
	Lendable bool `yaml:"lendable,omitempty" json:"lendable,omitempty"`
	// PriorityScheduling says the pool's engines schedule by each
	// request's priority field, lower values first (vLLM's
	// --scheduling-policy priority; SGLang's --enable-priority-scheduling
	// with --schedule-low-priority-values-first): the gateway then sends
	// every request its band as priority (interactive 0, standard 1,
	// background 2). While every available endpoint of a model is in such
	// pools, flow control dispatches the model's interactive turns whenever
	// it has a slot, however saturated, since the engines put them ahead of
	// the lower bands they queue. Default false: the engines serve first
	// come, first served.
	PriorityScheduling bool `yaml:"priorityScheduling,omitempty" json:"priorityScheduling,omitempty"`
	// LendSchedule lends a lendable pool in weekly windows, besides (or
	// instead of) the admin API's lend and reclaim. Optional.
	LendSchedule *LendSchedule `yaml:"lendSchedule,omitempty" json:"lendSchedule,omitempty"`
	// Endpoints are the replicas of a pool with static discovery (the
	// default): at least one. Other discovery kinds list none.
	Endpoints []EndpointConfig `yaml:"endpoints" json:"endpoints"`
	// Discovery says where the pool's endpoints come from: the endpoints
	// list above (nil, or kind static), an endpoints file, or Kubernetes.
	Discovery *DiscoveryConfig `yaml:"discovery,omitempty" json:"discovery,omitempty"`
	// Tokenizer is how the gateway turns the pool's prompts into the
	// engine's token ids. Zero means approximate. All pools serving one
	// model must agree.
	Tokenizer TokenizerConfig `yaml:"tokenizer,omitempty" json:"tokenizer,omitempty"`
	// Adapters are LoRA adapters of the served model that the pool's
	// engines serve: a request naming one goes to a replica that has it
	// loaded (routing's lora-affinity filter). Adapters the engines list
	// in /v1/models (entries with a parent) are served too without being
	// named here. Optional.
	Adapters []AdapterConfig `yaml:"adapters,omitempty" json:"adapters,omitempty"`
	// LoRALoading is "off" (default: the engines load adapters
	// themselves, or refuse) or "on-demand": the gateway loads an
	// adapter on the replica routing chose before sending it the request
	// (LoRALoadingOnDemand).
	LoRALoading string `yaml:"loraLoading,omitempty" json:"loraLoading,omitempty"`
	// MaxLoRA is the adapter slots of each replica when its engine does
	// not report them (vllm:lora_requests_info's max_lora). 0 (default):
	// the engine's word only.
	MaxLoRA int `yaml:"maxLoRA,omitempty" json:"maxLoRA,omitempty"`
	// Wake is the hook that starts the pool when a turn arrives while it
	// has no endpoint (scaled to zero): the turn waits for one instead of
	// failing. Optional.
	Wake *WakeConfig `yaml:"wake,omitempty" json:"wake,omitempty"`
}

// Tokenizer kinds.
const (
	// TokenizerApproximate estimates tokens (prompt.Approx): exact
	// against the simulator, an estimate against real engines.
	TokenizerApproximate = "approximate"
	// TokenizerHF runs the model's Hugging Face tokenizer.json and chat
	// template in process (prompt/hf).
	TokenizerHF = "hf"
	// TokenizerEngine asks the pool's engine to render and tokenize each
	// prompt (vLLM's and SGLang's POST /tokenize).
	TokenizerEngine = "engine"
)

// TokenizerConfig chooses a pool's tokenizer.
type TokenizerConfig struct {
	// Kind is "approximate" (default), "hf" or "engine".
	Kind string `yaml:"kind" json:"kind"`
	// Path is the model directory of kind hf: tokenizer.json (or
	// tokenizer.json.gz) and tokenizer_config.json with the chat
	// template. Required for hf, unused otherwise.
	Path string `yaml:"path,omitempty" json:"path,omitempty"`
	// CacheBytes bounds the memory of kind hf's incremental token cache,
	// which keeps each session's last prompt ids so that its next turn
	// encodes only the new suffix. Default 256 MiB; negative disables
	// the cache.
	CacheBytes int64 `yaml:"cacheBytes,omitempty" json:"cacheBytes,omitempty"`
}

// DefaultTokenCacheBytes is TokenizerConfig.CacheBytes's default.
const DefaultTokenCacheBytes = 256 << 20

// Normal is c with its defaults filled in: Kind approximate when empty.
func (c TokenizerConfig) Normal() TokenizerConfig {
	if c.Kind == "" {
		c.Kind = TokenizerApproximate
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultTokenCacheBytes
	}
	return c
}

// EndpointConfig is one engine replica.
type EndpointConfig struct {
	// URL is the engine's base URL, e.g. http://10.0.0.7:8000. Required.
	URL string `yaml:"url" json:"url"`
	// KVEvents is the engine's KV event publisher, e.g. tcp://10.0.0.7:5557.
	// Empty means none: the KV index is fed by routing decisions alone.
	KVEvents string `yaml:"kvEvents,omitempty" json:"kvEvents,omitempty"`
	// BootstrapPort is the port of an SGLang prefill engine's bootstrap
	// server (its --disaggregation-bootstrap-port), named to decoders as
	// bootstrap_port with the endpoint's host as bootstrap_host. Read only
	// for endpoints of prefill pools with engine sglang. Default 8998,
	// SGLang's.
	BootstrapPort int `yaml:"bootstrapPort,omitempty" json:"bootstrapPort,omitempty"`
	// Revision is the engine's revision (a rollout's generation), as
	// discovery reads it from a pod's labels: a prefill leg pairs only
	// with a decoder of a compatible revision (routing.pd.
	// compatibleRevisions). Empty: unknown, which pairs with unknown.
	Revision string `yaml:"revision,omitempty" json:"revision,omitempty"`
}

// DefaultBootstrapPort is SGLang's default --disaggregation-bootstrap-port.
const DefaultBootstrapPort = 8998

// Options are the fleet-wide knobs. Zero values take the defaults above.
type Options struct {
	// ScrapeInterval between metric scrapes of one endpoint. Default 200ms:
	// admission and routing read the engines' queues from these scrapes,
	// and a queue that has emptied since holds turns at the gateway until
	// the next one.
	ScrapeInterval time.Duration `yaml:"scrapeInterval" json:"scrapeInterval"`
	// StaleAfter marks an endpoint's load stale when no scrape succeeded for
	// this long. Default 1.5s, or 3 × ScrapeInterval when that is longer.
	StaleAfter time.Duration `yaml:"staleAfter" json:"staleAfter"`
	// KVEventsInterval spaces the reads of each engine's KV events
	// (kv.SubscriberConfig.ReadInterval): while events keep coming, one
	// read an interval takes every batch sent meanwhile, instead of a
	// wakeup a batch; an event waits at most this long. Zero: 20ms;
	// negative: each batch read as it comes.
	KVEventsInterval time.Duration `yaml:"kvEventsInterval" json:"kvEventsInterval"`
	// HealthInterval between GET /health probes. Default 2s.
	HealthInterval time.Duration `yaml:"healthInterval" json:"healthInterval"`
	// HealthFailures is how many consecutive failed /health probes (an
	// answer other than 200, a timeout) turn an endpoint unhealthy, so that
	// one probe lost to a busy moment does not take a replica out. A refused
	// connection turns it unhealthy at once: nothing listens there. One
	// passing probe makes it healthy again. Default 3 probes; at least 1.
	HealthFailures int `yaml:"healthFailures" json:"healthFailures"`
	// BreakerFailures is the number of consecutive failures that opens an
	// endpoint's breaker. Default 5.
	BreakerFailures uint32 `yaml:"breakerFailures" json:"breakerFailures"`
	// BreakerOpenFor is how long a breaker stays open before a trial. Default 10s.
	BreakerOpenFor time.Duration `yaml:"breakerOpenFor" json:"breakerOpenFor"`
	// ConnectTimeout bounds dialing an engine. Default 3s.
	ConnectTimeout time.Duration `yaml:"connectTimeout" json:"connectTimeout"`
	// RequestTimeout bounds a whole engine request, stream included. Default 10m.
	RequestTimeout time.Duration `yaml:"requestTimeout" json:"requestTimeout"`
	// MaxRetries is how many other endpoints a request may try when the
	// failure came before the first byte. Default 2; negative disables.
	MaxRetries int `yaml:"maxRetries" json:"maxRetries"`
	// MaxMigrations is how many times a streamed answer may move to
	// another endpoint when its engine dies mid-stream: the text already
	// generated is handed to the next engine as the start of the answer,
	// and the client sees one stream. Default 2; negative disables.
	MaxMigrations int `yaml:"maxMigrations" json:"maxMigrations"`
}

// EnsureDefaults fills zero fields with the defaults.
func (o *Options) EnsureDefaults() {
	if o.ScrapeInterval <= 0 {
		o.ScrapeInterval = DefaultScrapeInterval
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = max(DefaultStaleAfter, 3*o.ScrapeInterval)
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.HealthFailures == 0 {
		o.HealthFailures = DefaultHealthFailures
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerOpenFor <= 0 {
		o.BreakerOpenFor = DefaultBreakerOpenFor
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MaxMigrations == 0 {
		o.MaxMigrations = DefaultMaxMigrations
	}
	if o.MaxMigrations < 0 {
		o.MaxMigrations = 0
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
}

// Validate reports every problem of the options at once, each a
// FieldError named as in the config file's fleet section. Call it after
// EnsureDefaults: zero fields are then the defaults.
func (o *Options) Validate() error {
	var errs []error
	if o.HealthFailures < 1 {
		errs = append(errs, FieldErrorf("fleet.healthFailures", "%d is not at least 1", o.HealthFailures))
	}
	return errors.Join(errs...)
}

// prefillOnly reports the models only prefill pools serve: nothing
// could decode them.
func prefillOnly(pcs []PoolConfig) []error {
	var errs []error
	whole := map[string]bool{}
	for _, pc := range pcs {
		if pc.Role != RolePrefill {
			for _, m := range pc.ServedModels {
				whole[m] = true
			}
		}
	}
	for i, pc := range pcs {
		if pc.Role != RolePrefill {
			continue
		}
		for _, m := range pc.ServedModels {
			if !whole[m] {
				errs = append(errs, FieldErrorf(fmt.Sprintf("pools[%d].role", i), "prefill pool %q serves %q, which no decode or both pool serves", pc.Name, m))
			}
		}
	}
	return errs
}

// ValidatePools reports every problem in a pool list at once, each a
// FieldError.
func ValidatePools(pcs []PoolConfig) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, FieldErrorf(field, format, args...))
	}
	if len(pcs) == 0 {
		bad("pools", "at least one pool is required")
	}
	names := map[string]bool{}
	urls := map[string]string{}
	for i, pc := range pcs {
		where := fmt.Sprintf("pools[%d]", i)
		if pc.Name == "" {
			bad(where+".name", "required")
		} else if names[pc.Name] {
			bad(where+".name", "duplicate pool %q", pc.Name)
		}
		names[pc.Name] = true
		switch pc.Engine {
		case "", EngineVLLM, EngineVLLMTPU, EngineSGLang:
		default:
			bad(where+".engine", "%q is not vllm, vllm-tpu or sglang", pc.Engine)
		}
		switch pc.Role {
		case "", RoleBoth, RolePrefill, RoleDecode:
		default:
			bad(where+".role", "%q is not both, prefill or decode", pc.Role)
		}
		if pc.Wake != nil {
			errs = append(errs, pc.Wake.validate(where+".wake")...)
		}
		if pc.Lendable && pc.Role != "" && pc.Role != RoleBoth {
			bad(where+".lendable", "a lendable pool takes whole requests: role %q must be both", pc.Role)
		}
		if ls := pc.LendSchedule; ls != nil {
			if !pc.Lendable {
				bad(where+".lendSchedule", "only a lendable pool is lent: set lendable: true")
			}
			ls.Validate(where+".lendSchedule", bad)
		}
		if pc.Accelerator != "" {
			if _, ok := accelerators.LookupAccelerator(pc.Accelerator); !ok {
				bad(where+".accelerator", "unknown %q (known: %s)", pc.Accelerator, strings.Join(accelerators.AcceleratorNames(), ", "))
			}
		}
		if pc.Model != "" {
			if _, ok := accelerators.LookupModel(pc.Model); !ok {
				bad(where+".model", "unknown profile %q (known: %s)", pc.Model, strings.Join(accelerators.ModelNames(), ", "))
			}
		}
		if len(pc.ServedModels) == 0 {
			bad(where+".servedModels", "at least one model name is required")
		}
		pc.validateLoRA(where, bad)
		pc.Discovery.validate(where, len(pc.Endpoints) > 0, bad)
		for j, ec := range pc.Endpoints {
			ew := fmt.Sprintf("%s.endpoints[%d]", where, j)
			u, err := url.Parse(ec.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad(ew+".url", "%q is not an http(s) URL", ec.URL)
				continue
			}
			if prev, dup := urls[ec.URL]; dup {
				bad(ew+".url", "%q already listed at %s", ec.URL, prev)
			}
			urls[ec.URL] = ew
			if ec.KVEvents != "" && !strings.HasPrefix(ec.KVEvents, "tcp://") {
				bad(ew+".kvEvents", "%q is not a tcp:// address", ec.KVEvents)
			}
			if ec.BootstrapPort < 0 || ec.BootstrapPort > 65535 {
				bad(ew+".bootstrapPort", "%d is not a port", ec.BootstrapPort)
			}
		}
	}
	errs = append(errs, prefillOnly(pcs)...)
	errs = append(errs, tokenizers(pcs)...)
	return errors.Join(errs...)
}

// tokenizers reports tokenizer configs that are wrong, and models whose
// pools disagree on one: a model's prompts are hashed once, whichever
// pool takes them.
func tokenizers(pcs []PoolConfig) []error {
	var errs []error
	first := map[string]int{} // model → the first pool serving it
	for i, pc := range pcs {
		where := fmt.Sprintf("pools[%d].tokenizer", i)
		tc := pc.Tokenizer.Normal()
		switch tc.Kind {
		case TokenizerApproximate, TokenizerEngine:
			if tc.Kind == TokenizerEngine && pc.Discovery.kind() != DiscoveryStatic {
				errs = append(errs, FieldErrorf(where+".kind", "kind engine asks the pool's first listed endpoint, and a pool with %s discovery lists none: use approximate or hf", pc.Discovery.kind()))
			}
			if tc.Path != "" {
				errs = append(errs, FieldErrorf(where+".path", "only kind hf reads a path, not %s", tc.Kind))
			}
		case TokenizerHF:
			if tc.Path == "" {
				errs = append(errs, FieldErrorf(where+".path", "required for kind hf: a directory with tokenizer.json and tokenizer_config.json"))
			}
		default:
			errs = append(errs, FieldErrorf(where+".kind", "%q is not approximate, hf or engine", pc.Tokenizer.Kind))
		}
		for _, m := range pc.ServedModels {
			j, seen := first[m]
			if !seen {
				first[m] = i
				continue
			}
			if other := pcs[j].Tokenizer.Normal(); other != tc {
				errs = append(errs, FieldErrorf(where, "pool %q serves %q with tokenizer %s, but pool %q (pools[%d]) with %s: all pools of a model must use one tokenizer", pc.Name, m, tc, pcs[j].Name, j, other))
			}
		}
	}
	return errs
}

// String is c as the config spells it.
func (c TokenizerConfig) String() string {
	if c.Path == "" {
		return c.Kind
	}
	return c.Kind + " " + c.Path
}
