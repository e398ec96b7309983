package stack

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/batch"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/gateway"
	"github.com/turnpike-gateway/turnpike/guard"
	"github.com/turnpike-gateway/turnpike/models"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/tracing"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Defaults of the top-level config.
const (
	DefaultAddr    = "127.0.0.1:8080"
	DefaultDataDir = "./turnpike-data"
	// DefaultShutdownDelay is how long /readyz fails before the gateway
	// stops accepting, at SIGTERM: long enough for a load balancer (a
	// Kubernetes Service's endpoints) to stop sending new requests.
	DefaultShutdownDelay = 5 * time.Second
	// DefaultShutdownTimeout bounds the drain of in-flight requests at
	// shutdown (gateway.DefaultShutdownTimeout).
	DefaultShutdownTimeout = gateway.DefaultShutdownTimeout
)

// APIVersionV1 is the config file's apiVersion, the one this gateway
// reads. A file without apiVersion is read as turnpike/v1, with a
// warning (Config.Warnings); one naming any other version is refused.
const APIVersionV1 = "turnpike/v1"

// ServerConfig is the server section: how the gateway shuts down, and
// how long it keeps the answers of requests sent with an Idempotency-Key.
type ServerConfig struct {
	// ShutdownDelay is how long, at SIGTERM, /readyz answers 503 while
	// the gateway still serves every request, before it stops accepting:
	// the time a load balancer takes to see it unready. Default 5s; a
	// negative value is none.
	ShutdownDelay time.Duration `yaml:"shutdownDelay"`
	// ShutdownTimeout bounds how long, once it stops accepting, the
	// gateway waits for in-flight requests (streams included) before it
	// ends them. Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdownTimeout"`
	// IdempotencyTTL is how long the answer of a non-streamed Responses
	// or chat request sent with an Idempotency-Key header is kept in the
	// state store, so that a retry of it, on any gateway of the store,
	// gets that answer again instead of running a second time. Default
	// 1h.
	IdempotencyTTL time.Duration `yaml:"idempotencyTTL"`
	// FlushInterval spaces the writes of a streamed answer (chat,
	// completions, Responses) to its client: once the first token has
	// gone out at once, the gateway reads its engine's stream and writes
	// to the client at most once an interval, each write carrying every
	// token the engine sent meanwhile. An engine streams a token at a
	// time; at thousands of streams a read and a write a token are most of
	// the gateway's CPU, and an interval of 20–50ms, shorter than a reader
	// notices, cuts them to a few a second a stream at no cost to TTFT.
	// Default 0: each token as it comes. At most 1s.
	FlushInterval time.Duration `yaml:"flushInterval"`
}

// EnsureDefaults fills unset fields.
func (c *ServerConfig) EnsureDefaults() {
	if c.ShutdownDelay == 0 {
		c.ShutdownDelay = DefaultShutdownDelay
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.IdempotencyTTL == 0 {
		c.IdempotencyTTL = gateway.DefaultIdempotencyTTL
	}
}

// Validate reports every problem at once.
func (c *ServerConfig) Validate() error {
	var errs []error
	if c.ShutdownTimeout < 0 {
		errs = append(errs, errors.New("server.shutdownTimeout: must not be negative"))
	}
	if c.IdempotencyTTL < 0 {
		errs = append(errs, errors.New("server.idempotencyTTL: must not be negative"))
	}
	if c.FlushInterval < 0 || c.FlushInterval > dispatch.MaxFlushInterval {
		errs = append(errs, fmt.Errorf("server.flushInterval: %v, want 0 to %v", c.FlushInterval, dispatch.MaxFlushInterval))
	}
	return errors.Join(errs...)
}

// delay is ShutdownDelay, none when negative.
func (c *ServerConfig) delay() time.Duration { return max(c.ShutdownDelay, 0) }

// Config is the whole config file. Every section has defaults; only pools
// are required (and only when not running the embedded demo fleet).
type Config struct {
	// APIVersion is the file's version, APIVersionV1. Default (absent):
	// read as APIVersionV1, with a warning.
	APIVersion string `yaml:"apiVersion"`
	// Addr is the listen address. Default 127.0.0.1:8080.
	Addr string `yaml:"addr"`
	// Server is how the gateway shuts down (see ServerConfig).
	Server ServerConfig `yaml:"server"`
	// DataDir holds the state store when it is Pebble. Default
	// ./turnpike-data.
	DataDir string `yaml:"dataDir"`
	// State chooses the state store: pebble (default) under DataDir, or
	// redis, which several gateways share (see state.Config).
	State state.Config `yaml:"state"`
	// Pools are the engine pools. At least one.
	Pools []pools.PoolConfig `yaml:"pools"`
	// Fleet holds scrape, health, breaker and retry knobs (see pools.Options).
	Fleet pools.Options `yaml:"fleet"`
	// Routing chooses and tunes the routing policy (see affinity.Config)
	// and prefill/decode disaggregation (pd). Default policy cache-aware.
	Routing RoutingConfig `yaml:"routing"`
	// Models rewrites the models clients name: aliases and rules with
	// weighted targets and fallbacks (see models.Config). Default none.
	Models models.Config `yaml:"models"`
	// Guard is the content-safety check a turn's input is sent to before
	// an engine is asked (see guard.Config). Default none.
	Guard guard.Config `yaml:"guard"`
	// Sessions bounds session state (see sessions.Options).
	Sessions sessions.Options `yaml:"sessions"`
	// FlowControl is bands, saturation, shedding and queueing (see
	// turns.FlowControl); changeable at runtime through the admin API.
	FlowControl turns.FlowControl `yaml:"flowControl"`
	// Responses tunes the Responses API's state and background work (see
	// responses.Config).
	Responses responses.Config `yaml:"responses"`
	// Batch tunes the Files and Batch API's runner (see batch.Config).
	Batch batch.Config `yaml:"batch"`
	// Admin is the admin token and the file's tenants (top-level keys
	// adminToken and tenants). No tenants anywhere: the gateway runs open.
	Admin admin.Config `yaml:",inline"`
	// BodyLimit bounds request bodies, in bytes. Default 32 MiB.
	BodyLimit int64 `yaml:"bodyLimit"`
	// BodyBudget bounds the bytes of request bodies held at once by the
	// requests being handled (see gateway.Options.BodyBudget): a request
	// past it is refused with a 503 and Retry-After before its body is
	// read. Default a quarter of the Go runtime's memory limit
	// (runtime.memoryLimit or GOMEMLIMIT), else 512 MiB. At least
	// bodyLimit.
	BodyBudget int64 `yaml:"bodyBudget"`
	// PromptMemoBytes bounds the memory of the chat bodies remembered so
	// that a conversation's next turn is parsed and hashed only past what
	// it shares with the last (see gateway.Options.PromptMemoBytes).
	// Default 64 MiB; negative remembers none.
	PromptMemoBytes int64 `yaml:"promptMemoBytes"`
	// Tracing exports OpenTelemetry traces over OTLP/HTTP (see
	// tracing.Config). Default off, unless OTEL_EXPORTER_OTLP_ENDPOINT is
	// set.
	Tracing tracing.Config `yaml:"tracing"`
	// Runtime tunes the Go runtime's garbage collector (see GoRuntime).
	// Default gcPercent 400.
	Runtime GoRuntime `yaml:"runtime"`

	// noVersion: the file had no apiVersion (Warnings).
	noVersion bool
}

// RoutingConfig is the routing section: the policy's keys and pd.
type RoutingConfig struct {
	affinity.Config `yaml:",inline"`
	// PD is when a model with prefill and decode pools disaggregates a
	// turn (see affinity.PDConfig). Default uncachedTokens 512.
	PD affinity.PDConfig `yaml:"pd"`
	// Revisions is, by model, where new sessions go while several
	// revisions serve it: weights for a canary, or a preferred revision
	// (see affinity.RevisionPolicy); changeable at runtime through the
	// admin API. Default: the newest revision, that of the endpoint that
	// joined last.
	Revisions map[string]affinity.RevisionPolicy `yaml:"revisions"`
	// HandOff is what becomes of the sessions pinned to an endpoint that
	// starts to drain: re-pinned at once, and their new endpoint warmed
	// (see dispatch.HandOffConfig). Default warm-ups on, 50000 tokens a
	// second.
	HandOff dispatch.HandOffConfig `yaml:"handOff"`
	// KVIndexMaxBlocks bounds the KV-cache index's blocks per endpoint
	// and tier, whatever an engine reports of its KV capacity, so that
	// the index's memory is bounded by configuration (docs/memory.md).
	// Default kv.DefaultMaxCapacity (131072 blocks, 2M tokens); negative
	// leaves the engines' reports unbounded.
	KVIndexMaxBlocks int `yaml:"kvIndexMaxBlocks"`
	// ShareRecords, with state.backend redis, publishes the prompts this
	// gateway routes (which endpoint got which block chain) to the other
	// gateways on the same Redis and applies theirs to this gateway's KV
	// index, so that a turn landing on another gateway still finds its
	// prefix (docs/state.md). Default true; ignored with pebble, where
	// there is one gateway.
	ShareRecords *bool `yaml:"shareRecords"`
	// ShareLoad, with state.backend redis, reports this gateway's
	// requests in flight on each endpoint (and their tokens) to the other
	// gateways on the same Redis every 100 ms, and counts theirs in
	// routing and admission, so that gateways behind one Service see one
	// fleet's load (docs/state.md). Default true; ignored with pebble.
	ShareLoad *bool `yaml:"shareLoad"`
}

// shareLoad reports whether load is shared, given the state backend.
func (r *RoutingConfig) shareLoad(backend string) bool {
	return backend == state.BackendRedis && (r.ShareLoad == nil || *r.ShareLoad)
}

// shareRecords reports whether routing records are shared, given the
// state backend.
func (r *RoutingConfig) shareRecords(backend string) bool {
	return backend == state.BackendRedis && (r.ShareRecords == nil || *r.ShareRecords)
}

// EnsureDefaults fills unset fields.
func (r *RoutingConfig) EnsureDefaults() {
	r.Config.EnsureDefaults()
	r.PD.EnsureDefaults()
	r.HandOff.EnsureDefaults()
}

// Validate reports every problem at once.
func (r *RoutingConfig) Validate() error {
	_, revErr := affinity.NewRevisions(r.Revisions)
	return errors.Join(r.Config.Validate(), r.PD.Validate(), r.HandOff.Validate(), revErr)
}

// Load reads a config file, fills its defaults and validates it. Unknown
// keys are errors: a misspelt key silently ignored is a production
// incident later.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// Parse is Load of a file's contents: every problem is reported at once.
// A file of another apiVersion is refused before anything else is read:
// its other keys may mean something else.
func Parse(b []byte) (*Config, error) {
	c, err := Decode(b)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Decode is Parse without the validation, for a config whose pools come
// from elsewhere (an embedded fleet's, added before Stack.Start validates
// the whole).
func Decode(b []byte) (*Config, error) {
	var version struct {
		APIVersion *string `yaml:"apiVersion"`
	}
	if err := yaml.Unmarshal(b, &version); err == nil && version.APIVersion != nil && *version.APIVersion != APIVersionV1 {
		return nil, fmt.Errorf("config: apiVersion %q is not one this gateway reads: want %s", *version.APIVersion, APIVersionV1)
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c.noVersion = c.APIVersion == ""
	c.EnsureDefaults()
	return &c, nil
}

// bodyBudget is BodyBudget, or its default under the Go runtime's memory
// limit as it stands (GoRuntime applied, GOMEMLIMIT read).
func (c *Config) bodyBudget() int64 {
	if c.BodyBudget > 0 {
		return c.BodyBudget
	}
	return gateway.BodyBudgetFor(memoryLimit())
}

// Warnings are what a valid file should still change: today, a missing
// apiVersion.
func (c *Config) Warnings() []string {
	if c.noVersion {
		return []string{"config: no apiVersion; read as " + APIVersionV1 + ": add `apiVersion: " + APIVersionV1 + "` at the top of the file"}
	}
	return nil
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if c.APIVersion == "" {
		c.APIVersion = APIVersionV1
	}
	c.Server.EnsureDefaults()
	c.Guard.EnsureDefaults()
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	c.State.EnsureDefaults()
	c.Routing.EnsureDefaults()
	c.Sessions.EnsureDefaults()
	c.FlowControl.EnsureDefaults()
	c.Fleet.EnsureDefaults()
	c.Admin.EnsureDefaults()
	c.Tracing.EnsureDefaults()
	c.Runtime.EnsureDefaults()
	c.Responses.EnsureDefaults()
}

// Where says where the state store is, for logs and errors.
func (c *Config) Where() string {
	if c.State.Backend == state.BackendRedis {
		return "redis at " + state.RedactURL(c.State.URL)
	}
	return "pebble in " + c.DataDir
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.APIVersion != "" && c.APIVersion != APIVersionV1 {
		errs = append(errs, fmt.Errorf("apiVersion: %q is not %s", c.APIVersion, APIVersionV1))
	}
	if err := c.Server.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := pools.ValidatePools(c.Pools); err != nil {
		errs = append(errs, err)
	}
	if err := c.Fleet.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.State.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Routing.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("routing: %w", err))
	}
	if err := c.FlowControl.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("flowControl: %w", err))
	}
	if err := c.Models.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Guard.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Admin.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Tracing.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Runtime.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Responses.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Batch.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.BodyLimit < 0 {
		errs = append(errs, errors.New("bodyLimit: must not be negative"))
	}
	if limit := cmp.Or(c.BodyLimit, gateway.DefaultBodyLimit); c.BodyBudget < 0 || (c.BodyBudget > 0 && c.BodyBudget < limit) {
		errs = append(errs, fmt.Errorf("bodyBudget: must hold one body of bodyLimit (%d bytes), or be 0 for the default", limit))
	}
	if len(errs) > 0 {
		return fmt.Errorf("config: %w", errors.Join(errs...))
	}
	return nil
}
