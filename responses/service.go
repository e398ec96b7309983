package responses

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/internal/wait"
	"github.com/turnpike-gateway/turnpike/jobs"
	"github.com/turnpike-gateway/turnpike/responses/mcpclient"
	"github.com/turnpike-gateway/turnpike/tracing"
)

// Defaults for Config.
const (
	DefaultWorkers            = 64
	DefaultMaxAttempts        = 2
	DefaultMaxQueued          = 10000
	DefaultMaxQueuedPerTenant = 1000
	DefaultRetryRefusedFor    = 10 * time.Minute
	DefaultCollectInterval    = time.Hour
	DefaultHostedTools        = HostedToolsDrop
	DefaultJobLease           = 15 * time.Second
	DefaultJobPoll            = 250 * time.Millisecond
)

// Waits between tries of a background response the engine refused.
const (
	// defaultRetryDelay is the wait when a refusal gives no RetryAfter.
	defaultRetryDelay = time.Second
	// maxRetryDelay caps one wait, whatever RetryAfter says.
	maxRetryDelay = 30 * time.Second
)

// Config configures a Service.
type Config struct {
	// Retention is how long a stored response, chain or conversation,
	// and a background response's events, are kept after their last
	// write: the TTL of the Store the Service runs on (StoreOptions.TTL),
	// which whoever builds both passes on. Default DefaultTTL (30 days).
	Retention time.Duration `yaml:"retention"`
	// Workers bounds the background responses running at once; more wait
	// queued. Default 64.
	Workers int `yaml:"workers"`
	// MaxAttempts is how many times a background response may be started.
	// One interrupted by a restart is re-run on the next Start until it
	// has been started this often, then marked failed. Default 2.
	MaxAttempts int `yaml:"-"`
	// MaxQueued bounds the background responses the service holds that
	// have not ended, running ones included, and with a HeldExchange
	// running those the other gateways on the store hold. Beyond it Create
	// answers ErrRateLimited (429, rate_limit_exceeded) before storing
	// anything. Default 10000.
	MaxQueued int `yaml:"-"`
	// MaxQueuedPerTenant is MaxQueued for each tenant. Default 1000.
	MaxQueuedPerTenant int `yaml:"-"`
	// FlushInterval spaces a streamed response's writes to its client:
	// once its first token has gone out, the stream's events go out at
	// most once an interval, each write carrying what the engine sent
	// meanwhile (dispatch.Turn.Linger). The gateway's server.flushInterval
	// sets it. 0: each event as it comes.
	FlushInterval time.Duration `yaml:"-"`
	// RetryRefusedFor is how long a background response keeps trying
	// when the engine refuses it with "try again later" (flow control
	// shedding load, a gateway shutting down), counted from the first
	// refusal. Each wait is the refusal's RetryAfter and up to a quarter
	// more, or when longer a second doubled at each refusal (less up to a
	// quarter), at most 30s. Then
	// the response fails with rate_limit_exceeded (a 429 refusal) or
	// server_overloaded. Default 10m; negative fails at the first refusal.
	RetryRefusedFor time.Duration `yaml:"-"`
	// JobLease is how long a gateway's claim on a background response
	// lasts unrenewed. The gateway that creates or takes over a response
	// claims it, renews the claim every third of JobLease while the
	// response waits or runs, and gives it up when the response ends;
	// every gateway on the store looks every half JobLease for
	// responses whose claim ran out (their gateway died or stopped) and
	// runs them. So each runs on one gateway at a time, and one a dead
	// gateway held starts again elsewhere within about 1.5×JobLease.
	// Default 15s.
	JobLease time.Duration `yaml:"jobLease"`
	// JobPoll is how often a gateway reads the cancels requested through
	// other gateways for the background responses it runs, and the new
	// stream events of a response another gateway runs that a client
	// follows through this one. Default 250ms.
	JobPoll time.Duration `yaml:"jobPoll"`
	// Holder names this gateway in its claims; gateways sharing a store
	// need different ones. Default (filled by New) a random id for each
	// Service.
	Holder string `yaml:"-"`
	// CollectInterval is the time between retention sweeps. Default 1h;
	// negative disables the collector.
	CollectInterval time.Duration `yaml:"-"`
	// HostedTools is what becomes of tools of the types OpenAI runs itself
	// (web_search, file_search, code_interpreter, image_generation,
	// computer_use_preview, local_shell, …), which turnpike cannot run:
	// HostedToolsDrop answers without them (counted in
	// turnpike_responses_hosted_tools_dropped_total{type}, logged at
	// debug), HostedToolsReject refuses the request with a 400 naming the
	// tool. Default drop.
	HostedTools HostedToolPolicy `yaml:"hostedTools"`
	// SealKeys are the AES-256 keys (32 bytes each) that seal the
	// encrypted_content of reasoning and compaction items: the first
	// seals, every one opens (list a new key first and keep the old ones
	// to rotate). Gateways sharing a store must share them. Empty (the
	// default) uses a key generated on first start and kept in the store
	// (k/seal), so blobs survive a restart. A config file gives each in
	// base64.
	SealKeys SealKeys `yaml:"sealKeys"`
	// MCPTimeout bounds each request to an MCP server (connect, list
	// tools, one call). Default 60s.
	MCPTimeout time.Duration `yaml:"mcpTimeout"`
	// MCPAllowedURLs are the URL prefixes of the MCP servers the gateway
	// may call for mcp tools ("https://tools.internal/"; "http://" allows
	// every plain-HTTP server); a tool on another server lists and calls
	// nothing (its items carry the error). Empty (the default) allows
	// none: a client must not make the gateway reach into the operator's
	// network.
	MCPAllowedURLs []string `yaml:"mcpAllowedURLs"`
	// ContextCacheBytes bounds the memory of the decoded contexts of the
	// responses that ended last, kept so that a chain's next turn decodes
	// only what it adds: the least recently used go first. Default
	// DefaultContextCacheBytes (64 MiB); negative keeps none.
	ContextCacheBytes int64 `yaml:"contextCacheBytes"`
	// Metrics, when not nil, registers the service's metrics.
	Metrics prometheus.Registerer `yaml:"-"`
	// Logger; nil means slog.Default().
	Logger *slog.Logger `yaml:"-"`
	// Now is the clock; nil means time.Now.
	Now func() time.Time `yaml:"-"`
	// Tracer traces the state reads and writes of a turn (a chain or
	// conversation loaded, a response stored) under the turn's span in
	// Create's context; nil traces nothing.
	Tracer *tracing.Tracer `yaml:"-"`
}

// SealKeys are Config.SealKeys; a config file lists each key in base64.
type SealKeys [][]byte

// UnmarshalYAML reads a list of base64 keys. A key that is not base64 is
// kept empty, for Validate to report with the others.
func (k *SealKeys) UnmarshalYAML(unmarshal func(any) error) error {
	var b64 []string
	if err := unmarshal(&b64); err != nil {
		return err
	}
	*k = make(SealKeys, len(b64))
	for i, s := range b64 {
		(*k)[i], _ = base64.StdEncoding.DecodeString(s)
	}
	return nil
}

// EnsureDefaults fills the zero fields; New fills Holder, Logger and Now.
func (c *Config) EnsureDefaults() {
	if c.Retention == 0 {
		c.Retention = DefaultTTL
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.ContextCacheBytes == 0 {
		c.ContextCacheBytes = DefaultContextCacheBytes
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.MaxQueuedPerTenant <= 0 {
		c.MaxQueuedPerTenant = DefaultMaxQueuedPerTenant
	}
	if c.RetryRefusedFor == 0 {
		c.RetryRefusedFor = DefaultRetryRefusedFor
	}
	if c.JobLease == 0 {
		c.JobLease = DefaultJobLease
	}
	if c.JobPoll == 0 {
		c.JobPoll = DefaultJobPoll
	}
	if c.CollectInterval == 0 {
		c.CollectInterval = DefaultCollectInterval
	}
	if c.MCPTimeout == 0 {
		c.MCPTimeout = DefaultMCPTimeout
	}
	if c.HostedTools == "" {
		c.HostedTools = DefaultHostedTools
	}
}

// Validate reports every problem of a config with its defaults filled
// (EnsureDefaults makes every other field valid).
func (c *Config) Validate() error {
	var errs []error
	if c.Retention < 0 || c.Workers < 0 || c.MCPTimeout < 0 || c.JobLease < 0 || c.JobPoll < 0 {
		errs = append(errs, errors.New("responses: retention, workers, mcpTimeout, jobLease and jobPoll must not be negative"))
	}
	errs = append(errs, c.HostedTools.Validate())
	for i, k := range c.SealKeys {
		if len(k) != sealKeyLen {
			errs = append(errs, fmt.Errorf("responses: sealKeys[%d]: want %d bytes (in a config file, in base64), not %d", i, sealKeyLen, len(k)))
		}
	}
	return errors.Join(errs...)
}

// Service answers the Responses and Conversations API on a StateStore,
// sending turns down the turn path (Engine). Create with New, then Start
// it; Close it before closing the store.
type Service struct {
	store  *StateStore
	cfg    Config
	log    *slog.Logger
	engine Engine
	// mcp reaches the MCP servers of mcp tools, the servers
	// Config.MCPAllowedURLs allows.
	mcp *mcpclient.Client
	// hostedDropped counts the hosted tools dropped from requests, by type.
	hostedDropped *prometheus.CounterVec
	// compactions counts compaction summaries written, by trigger
	// (request: POST /v1/responses/compact; threshold: context_management).
	compactions *prometheus.CounterVec
	// mcpRequests counts requests to MCP servers by op (list, call) and
	// result (ok, error).
	mcpRequests *prometheus.CounterVec
	// takenOver counts background responses this gateway claimed after
	// another's claim ran out (or a restart); claimsLost those it
	// stopped because another gateway holds their claim now.
	takenOver, claimsLost prometheus.Counter
	// contexts keeps the decoded contexts of the responses that ended
	// last, for their chains' next turns.
	contexts *contextCache
	// sealer seals and opens encrypted content; set by Start.
	sealer *sealer
	// sem holds one token per running background response.
	sem chan struct{}
	// jobs runs the background responses, each under a lease of the
	// store.
	jobs *jobs.Queue[*job]
	// ctx bounds the collector and the recovery of background responses;
	// Close cancels it.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu struct {
		sync.Mutex
		// protects the fields below
		started bool
		// held counts the background responses that have not ended, in
		// all and by tenant: from Create's admission to the job's end.
		held         int
		heldByTenant map[string]int
		// peers is what the other gateways on the store hold, as they
		// last reported it (HeldExchange); zero alone.
		peers HeldCounts
	}
}

// New builds a Service on store that runs its turns on engine. It starts
// nothing: no background response runs until Start. A config that does
// not Validate is a programming error (the assembly validates the
// file's): New panics on it, as on metrics it cannot register.
func New(store *StateStore, engine Engine, cfg Config) *Service {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if cfg.Holder == "" {
		cfg.Holder = newID("gw_")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Service{store: store, engine: engine, cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, cfg.Workers),
		contexts: newContextCache(cfg.ContextCacheBytes)}
	s.mcp = &mcpclient.Client{Timeout: cfg.MCPTimeout, Allow: s.mcpAllowed}
	s.hostedDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_responses_hosted_tools_dropped_total",
		Help: "Hosted tools (web_search, file_search, …) removed from Responses requests before they reached an engine, by tool type.",
	}, []string{"type"})
	s.compactions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_responses_compactions_total",
		Help: "Conversations compacted into a summary by the model, by trigger (request: POST /v1/responses/compact; threshold: context_management's compact_threshold).",
	}, []string{"trigger"})
	s.mcpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_responses_mcp_requests_total",
		Help: "Requests the gateway made to MCP servers for mcp tools, by op (list, call) and result (ok, error).",
	}, []string{"op", "result"})
	s.takenOver = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "turnpike_responses_background_taken_over_total",
		Help: "Pending background responses this gateway claimed and ran (or ended) because no live gateway held them: left by a restart, or by a gateway whose claim ran out.",
	})
	s.claimsLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "turnpike_responses_background_claims_lost_total",
		Help: "Background responses this gateway stopped running because another gateway took over their claim (this one failed to renew it in time).",
	})
	if cfg.Metrics != nil {
		s.takenOver = registerCounter(cfg.Metrics, s.takenOver)
		s.claimsLost = registerCounter(cfg.Metrics, s.claimsLost)
		s.mcpRequests = registerCounter(cfg.Metrics, s.mcpRequests)
		s.hostedDropped = registerCounter(cfg.Metrics, s.hostedDropped)
		s.compactions = registerCounter(cfg.Metrics, s.compactions)
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.jobs = s.newJobs()
	s.mu.heldByTenant = make(map[string]int)
	return s
}

// registerCounter registers c, or returns the one registered before it
// (another service on the same registry, in tests).
func registerCounter[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(fmt.Sprintf("responses: registering metrics: %v", err))
		}
		return are.ExistingCollector.(C)
	}
	return c
}

// Start claims and re-queues (or fails) the background responses left
// unfinished by a previous process, or by a gateway whose claim ran out,
// and starts the watch over claims and cancels and the retention
// collector. It is called once;
// ctx bounds the start itself, Close stops what it started.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.mu.started {
		s.mu.Unlock()
		return errors.New("responses: service already started")
	}
	s.mu.started = true
	s.mu.Unlock()

	keys, err := sealKeys(ctx, s.store, s.cfg.SealKeys)
	if err != nil {
		return err
	}
	if s.sealer, err = newSealer(keys); err != nil {
		return err
	}

	if err := s.jobs.Start(ctx); err != nil {
		return fmt.Errorf("responses: listing unfinished background responses: %w", err)
	}
	if s.cfg.CollectInterval > 0 {
		s.wg.Add(1)
		go s.collect()
	}
	return nil
}

// Close stops the collector and the background responses and waits for
// them, up to ctx. A background response stopped by Close is not ended:
// it stays pending in the store and Close gives up its claim, so the next
// Start, or another gateway on the store within half Config.JobLease, runs
// it again. (A gateway that dies leaves its claims to run out first.)
func (s *Service) Close(ctx context.Context) error {
	s.stop()
	jerr := s.jobs.Close(ctx)
	if err := errors.Join(jerr, wait.Group(ctx, &s.wg)); err != nil {
		return fmt.Errorf("responses: close: %w", err)
	}
	return nil
}

// collect sweeps the retention every Config.CollectInterval until Close.
func (s *Service) collect() {
	defer s.wg.Done()
	for jobs.Sleep(s.ctx, jobs.Wall, s.cfg.CollectInterval) {
		n, err := s.store.Collect(s.ctx, s.cfg.Now())
		if err != nil && s.ctx.Err() == nil {
			s.log.Warn("retention sweep failed", "err", err)
		} else if n > 0 {
			s.log.Info("retention sweep", "removed", n)
		}
	}
}

// newID returns prefix followed by 32 random hex digits.
func newID(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// HostedToolPolicy is what becomes of a request's hosted tools.
type HostedToolPolicy string

const (
	// HostedToolsDrop answers without them: they are removed from the
	// engine request, counted in turnpike_responses_hosted_tools_dropped_total
	// and logged at debug.
	HostedToolsDrop HostedToolPolicy = "drop"
	// HostedToolsReject refuses the request with a 400 naming the tool.
	HostedToolsReject HostedToolPolicy = "reject"
)

// Validate reports whether p is a policy.
func (p HostedToolPolicy) Validate() error {
	if p != HostedToolsDrop && p != HostedToolsReject {
		return fmt.Errorf("responses: hostedTools is %q; want %q or %q", p, HostedToolsDrop, HostedToolsReject)
	}
	return nil
}
