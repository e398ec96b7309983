package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	turnpike "github.com/turnpike-gateway/turnpike"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/batch"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/gateway"
	"github.com/turnpike-gateway/turnpike/gossip"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/tracing"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Embedded demo fleet defaults.
const (
	defaultSimReplicas    = 4
	defaultSimAccelerator = "h100"
	defaultSimModel       = "llama-3.1-8b"
	defaultSimServedModel = "meta-llama/Llama-3.1-8B-Instruct"
)

// simFlags describe the embedded simulated fleet.
type simFlags struct {
	replicas    int
	accelerator string
	model       string
	served      string
	flavor      string
	timeScale   float64
	numBlocks   int
	// KV tiers below HBM, in blocks per replica (shared: per pool).
	kvCPUBlocks, kvDiskBlocks, kvSharedBlocks int
	// topology is aggregated, pd, hbm, cpu-tier or mixed; prefill the P/D topology's prefill
	// replicas (0: half).
	topology string
	prefill  int
	// policy is bench's --policy, for --compare entries naming a
	// topology.
	policy string
	// scheduling is the engines' scheduling policy (sim.Config).
	scheduling string
	// tokenizer is a model directory whose chat template and tokenizer
	// the engines (and the gateway's pool) use; "" keeps the simulator's
	// documented rules.
	tokenizer string
	// ttftTarget is bench's --ttft-target, on the simulated clock.
	ttftTarget time.Duration
	// apart is bench's --isolation-processes.
	apart bool
}

// register adds the flags, named prefix+name; the replica count is
// registered under replicasFlag.
func (f *simFlags) register(fs *flag.FlagSet, prefix, replicasFlag string) {
	fs.IntVar(&f.replicas, replicasFlag, defaultSimReplicas, "number of simulated engines")
	fs.StringVar(&f.accelerator, prefix+"accelerator", defaultSimAccelerator, "simulated accelerator (a catalog name)")
	fs.StringVar(&f.model, prefix+"model", defaultSimModel, "simulated model profile")
	fs.StringVar(&f.served, prefix+"served-model", defaultSimServedModel, "model name the simulated engines serve")
	fs.StringVar(&f.flavor, prefix+"flavor", sim.FlavorVLLM, "engine flavour: vllm, vllm-tpu (vLLM on TPU, the KV cache series spelt as before their rename) or sglang")
	fs.Float64Var(&f.timeScale, prefix+"time-scale", 1, "simulated time per real second: 0.1 runs ten times faster")
	fs.IntVar(&f.numBlocks, prefix+"num-blocks", 0, "KV blocks per replica (0: from accelerator and model)")
	fs.IntVar(&f.kvCPUBlocks, prefix+"kv-cpu-blocks", 0, "KV blocks of host memory per replica that blocks evicted from HBM move to (0: none)")
	fs.IntVar(&f.kvDiskBlocks, prefix+"kv-disk-blocks", 0, "KV blocks of local disk per replica, below the CPU tier (0: none)")
	fs.IntVar(&f.kvSharedBlocks, prefix+"kv-shared-blocks", 0, "KV blocks of a store shared by every replica of the pool, below the local tiers (0: none)")
	fs.StringVar(&f.scheduling, prefix+"scheduling-policy", sim.SchedulingFCFS, "engines' scheduling policy, as vLLM's --scheduling-policy: fcfs, or priority (each request's priority field first, lowest value first; an embedded fleet's pool then sets priorityScheduling and runs without the interactive lane)")
	fs.StringVar(&f.tokenizer, prefix+"tokenizer", "", "model directory (tokenizer.json or .json.gz, tokenizer_config.json): the engines render chats with its chat template and tokenize with it, as a real engine of the model would; the embedded fleet's pool then uses tokenizer kind hf with it")
	if prefix != "" {
		fs.StringVar(&f.topology, prefix+"topology", topologyAggregated, "aggregated (every replica prefills and decodes), pd (a prefill pool and a decode pool, disaggregated by the gateway), hbm (aggregated, no KV tier below HBM) cpu-tier (aggregated, with a CPU tier of --"+prefix+"kv-cpu-blocks, default "+fmt.Sprint(defaultCPUTierFactor)+"× HBM) or mixed (an H200 pool and a TPU v6e pool of one model, half the replicas each)")
		fs.IntVar(&f.prefill, prefix+"prefill", 0, "pd topology: how many of the replicas prefill (0: half)")
	}
}

// fleet describes the embedded fleet the flags ask for.
func (f *simFlags) fleet() (*simFleet, error) {
	sf := &simFleet{cfg: f.config(), replicas: f.replicas, tokenizer: f.tokenizer}
	if f.tokenizer != "" {
		tok, err := loadSimTokenizer(f.tokenizer)
		if err != nil {
			return nil, err
		}
		sf.cfg.Tokenizer = tok
	}
	switch f.topology {
	case "", topologyAggregated:
	case topologyHBM:
		sf.cfg.KVCPUBlocks, sf.cfg.KVDiskBlocks, sf.cfg.KVSharedBlocks = 0, 0, 0
	case topologyCPUTier:
		if sf.cfg.KVCPUBlocks == 0 {
			n, err := hbmBlocks(&sf.cfg)
			if err != nil {
				return nil, err
			}
			sf.cfg.KVCPUBlocks = defaultCPUTierFactor * n
		}
	case topologyPD:
		sf.prefill = f.prefill
		if sf.prefill == 0 {
			sf.prefill = f.replicas / 2
		}
		if sf.prefill < 1 || sf.prefill >= f.replicas {
			return nil, fmt.Errorf("sim topology pd: %d prefill replicas of %d: want at least one prefill and one decode replica", sf.prefill, f.replicas)
		}
	case topologyMixed:
		if err := mixedFleet(sf); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("sim topology %q is not %s, %s, %s, %s or %s", f.topology, topologyAggregated, topologyPD, topologyHBM, topologyCPUTier, topologyMixed)
	}
	return sf, nil
}

func (f *simFlags) config() sim.Config {
	return sim.Config{
		Flavor:           f.flavor,
		Accelerator:      f.accelerator,
		Model:            f.model,
		ServedModelName:  f.served,
		TimeScale:        f.timeScale,
		NumBlocks:        f.numBlocks,
		KVCPUBlocks:      f.kvCPUBlocks,
		KVDiskBlocks:     f.kvDiskBlocks,
		KVSharedBlocks:   f.kvSharedBlocks,
		SchedulingPolicy: f.scheduling,
		// Each engine publishes its KV events on a port of its own.
		KVEventsAddr: "tcp://127.0.0.1:0",
	}
}

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (YAML); none: run with an embedded simulated fleet")
	addr := fs.String("addr", "", "listen address (default "+DefaultAddr+", or the config's addr)")
	dataDir := fs.String("data-dir", "", "state directory (default "+DefaultDataDir+", or the config's dataDir)")
	stateURL := fs.String("state-url", "", "keep state in the Redis at this URL (redis:// or rediss://) instead of Pebble under the data dir")
	policy := fs.String("policy", "", "routing policy: round-robin, least-loaded, session-hash, cache-aware or cost-aware (default cache-aware, or the config's routing.policy)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var sf simFlags
	sf.register(fs, "sim-", "sim-replicas")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}

	var cfg *Config
	if *configPath != "" {
		if cfg, err = loadConfig(*configPath); err != nil {
			return err
		}
	} else {
		cfg = &Config{}
		cfg.EnsureDefaults()
	}
	if *addr != "" {
		cfg.Addr = *addr
	}
	if *dataDir != "" {
		cfg.DataDir = *dataDir
	}
	if *stateURL != "" {
		cfg.State.Backend, cfg.State.URL = state.BackendRedis, *stateURL
	}
	if *policy != "" {
		cfg.Routing.Policy = *policy
	}
	// The embedded fleet's config is validated once its pools exist
	// (startStack); a file's here, with the flags over it.
	if (*policy != "" || *stateURL != "") && *configPath != "" {
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	cfg.Runtime.apply(os.Getenv, log)
	var embedded *simFleet
	if *configPath == "" {
		if embedded, err = sf.fleet(); err != nil {
			return err
		}
	}
	st, err := startStack(ctx, cfg, embedded, log)
	if err != nil {
		return err
	}
	if embedded != nil {
		printDemo(stdout, st, &sf, stateWhere(cfg))
	} else {
		log.Info("turnpike serving", "addr", "http://"+st.addr, "pools", len(cfg.Pools), "policy", cfg.Routing.Policy, "state", stateWhere(cfg))
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down: finishing in-flight requests")
	case err := <-st.served:
		st.Close(context.Background())
		return err
	}
	return st.Close(context.Background())
}

// lendScheduleInterval is how often the gateway looks for a scheduled
// lending window to open (pools.LendSchedule).
const lendScheduleInterval = time.Second

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// stack is one running gateway with its fleet view and, for the embedded
// demo and benchmarks, its simulated engines.
type stack struct {
	addr   string
	fleet  *fleet
	reg    *pools.Registry
	index  *kv.Index
	gw     *gateway.Server
	served chan error
	// life stops what startStack started, in reverse order.
	life lifecycle
}

// startStack starts everything a config describes; with sf set it first
// starts the simulated engines and serves them as its pools.
// Components run until Close, not until ctx ends: a signal starts a
// graceful Close, in which the gateway finishes its streams before the
// engines and stores under it stop.
func startStack(ctx context.Context, cfg *Config, sf *simFleet, log *slog.Logger) (_ *stack, err error) {
	st := &stack{served: make(chan error, 1), life: lifecycle{log: log}}
	defer func() {
		if err != nil {
			st.Close(context.Background())
		}
	}()
	// run is the context of background loops; the last stop cancels it.
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st.life.start(ctx, "background loops", nil, noErr(cancel))
	if sf != nil {
		if st.fleet, err = startFleet(run, *sf); err != nil {
			return st, fmt.Errorf("start simulated fleet: %w", err)
		}
		st.life.start(ctx, "simulated fleet", nil, func(context.Context) error { return st.fleet.Close() })
		cfg.Pools = st.fleet.pools
		if sf.cfg.SchedulingPolicy == sim.SchedulingPriority && cfg.Routing.InteractiveLane == affinity.DefaultInteractiveLane {
			// Engines that take interactive turns ahead of the rest
			// need no endpoint kept for them.
			cfg.Routing.InteractiveLane = -1
		}
		if err := cfg.Validate(); err != nil {
			return st, err
		}
	}
	if st.reg, err = pools.NewRegistry(cfg.Pools, cfg.Fleet, log); err != nil {
		return st, err
	}
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// The KV-cache index mirrors each engine's cache: bounded by the
	// capacity the engine reports, fed by routing and by KV events.
	index := kv.NewIndex(kv.IndexOptions{})
	st.index = index
	hasher := &kv.Hasher{}
	st.reg.OnLoad(func(ep *pools.Endpoint, l pools.Load) {
		if l.NumGPUBlocks > 0 && (l.BlockSize == 0 || l.BlockSize == kv.DefaultBlockSize) {
			index.SetCapacity(ep.Index, l.NumGPUBlocks)
		}
	})
	names := make([]string, len(st.reg.Endpoints))
	groups := map[string]int{}
	for i, ep := range st.reg.Endpoints {
		names[i] = ep.ID
		// The replicas of a pool share its Shared tier (a store such as
		// LMCache's remote backend): a block in it counts for all of them.
		g, ok := groups[ep.Pool.Config.Name]
		if !ok {
			g = len(groups)
			groups[ep.Pool.Config.Name] = g
		}
		index.SetGroup(ep.Index, g)
	}
	kvMetrics := kv.NewCollector(index, names)
	metrics.MustRegister(kvMetrics)
	var subs []*kv.Subscriber
	for _, ep := range st.reg.Endpoints {
		if ep.KVEvents == "" {
			continue
		}
		sub, err := kv.NewSubscriber(index, kv.SubscriberConfig{
			Endpoint: ep.Index,
			Addr:     ep.KVEvents,
			Model:    ep.Pool.Config.ServedModels[0],
			Hasher:   hasher,
			Logger:   log.With("endpoint", ep.ID),
		})
		if err != nil {
			return st, err
		}
		kvMetrics.AddSubscriber(ep.Index, sub)
		subs = append(subs, sub)
	}
	// The KV subscriptions end before the engines they follow (the
	// embedded fleet stops after this): an engine's stream closing under
	// a live subscription reads as an interrupted one.
	subsCtx, stopSubs := context.WithCancel(run)
	var subsRunning sync.WaitGroup
	st.life.start(ctx, "fleet view", func(context.Context) error {
		st.reg.Start(run)
		for _, sub := range subs {
			subsRunning.Go(func() { sub.Run(subsCtx) })
		}
		return nil
	}, func(ctx context.Context) error {
		stopSubs()
		waitGroup(ctx, &subsRunning, subscriptionsStop)
		st.reg.Close()
		return nil
	})

	// Traces, when an OTLP endpoint is configured; closed last, so that
	// the spans of the requests the gateway finishes are flushed.
	traces, err := tracing.New(ctx, cfg.Tracing, metrics, log)
	if err != nil {
		return st, err
	}
	st.life.start(ctx, "tracing", nil, traces.Close)
	tracer := traces.Tracer()
	if tracer.On() {
		log.Info("tracing on", "service", cfg.Tracing.ServiceName, "endpoint", cmp.Or(cfg.Tracing.Endpoint, "from the environment"))
	}

	// One state store, Pebble under the data dir or a shared Redis, and a
	// namespace in it for each owner. The prefixes are those the data dir
	// has always been written with.
	db, err := state.Open(ctx, cfg.State, cfg.DataDir, log)
	if err != nil {
		return st, fmt.Errorf("open state store (%s): %w", stateWhere(cfg), err)
	}
	st.life.start(ctx, "state store", nil, func(context.Context) error { return db.Close() })
	if c := db.Collector(); c != nil {
		metrics.MustRegister(c)
	}
	if err := startRoutePeers(ctx, st, cfg, db, index, names, metrics, log); err != nil {
		return st, err
	}
	store := responses.NewStore(db.Namespace("rs/"), responses.StoreOptions{TTL: cfg.Responses.Retention})

	sessOpts := cfg.Sessions
	sessOpts.Metrics = metrics
	if cfg.State.Backend == state.BackendRedis && sessOpts.PinRefresh == 0 {
		// Other gateways pin sessions too: look at their pins.
		sessOpts.PinRefresh = sessions.DefaultSharedPinRefresh
	}
	pins := sessions.NewAsyncPinStore(&sessions.KVPinStore{Namespace: db.Namespace("m/sessions/")}, 0,
		func(err error) { log.Warn("session pin not saved", "err", err) })
	sessOpts.Pins = pins
	sess, err := sessions.NewStore(sessOpts)
	if err != nil {
		return st, err
	}
	if err := st.life.start(ctx, "sessions", func(ctx context.Context) error {
		pins.Start()
		if n, err := sess.LoadPins(ctx, time.Now()); err != nil {
			log.Warn("session pins not restored", "err", err)
		} else if n > 0 {
			log.Info("session pins restored", "pins", n)
		}
		go every(run, time.Minute, func() { sess.Sweep(time.Now()) })
		return nil
	}, noErr(pins.Close)); err != nil {
		return st, err
	}
	cfg.Routing.TierWeights = catalogTierWeights(cfg.Routing.TierWeights, cfg.Pools)
	policy, err := affinity.NewPolicy(cfg.Routing.Config, affinity.Deps{Index: index, Hasher: hasher, Sessions: sess, Metrics: metrics})
	if err != nil {
		return st, err
	}
	gossipMetrics, err := gossip.NewMetrics(metrics)
	if err != nil {
		return st, err
	}
	if err := startLoadShare(ctx, st, cfg, db, gossipMetrics, log); err != nil {
		return st, err
	}
	flow, err := turns.New(turns.Config{FlowControl: cfg.FlowControl}, turns.WithRegisterer(metrics))
	if err != nil {
		return st, err
	}
	st.life.start(ctx, "flow control", startNoErr(flow.Start), func(context.Context) error { return flow.Close() })
	toks, err := modelTokenizers(cfg.Pools, metrics)
	if err != nil {
		return st, err
	}
	d, err := dispatch.New(dispatch.Options{Registry: st.reg, Policy: policy, Sessions: sess, Flow: flow, Lane: interactiveLane(&cfg.Routing.Config), Hasher: hasher, Tokenizers: toks, Logger: log, Metrics: metrics, PD: &cfg.Routing.PD, Tracer: tracer})
	if err != nil {
		return st, err
	}
	// Background jobs stop before flow control closes: they stay pending
	// for the next start instead of failing on a closing controller.
	sealKeys, err := cfg.Responses.sealKeys()
	if err != nil {
		return st, err
	}
	svc := responses.New(store, d, responses.Config{
		Workers: cfg.Responses.Workers, HostedTools: cfg.Responses.HostedTools, SealKeys: sealKeys,
		MCPTimeout: cfg.Responses.MCPTimeout, MCPAllowedURLs: cfg.Responses.MCPAllowedURLs, Metrics: metrics, Logger: log,
		Tracer:   tracer,
		JobLease: cfg.Responses.JobLease, JobPoll: cfg.Responses.JobPoll,
	})
	if err := st.life.start(ctx, "responses", svc.Start, func(context.Context) error { return svc.Close() }); err != nil {
		return st, err
	}
	if err := startHeldShare(ctx, st, db, svc, gossipMetrics, log); err != nil {
		return st, err
	}

	// Batches run on flow control's lowest band: they stop before it
	// closes, and what was in flight runs again at the next start.
	batches, err := batch.New(batch.Options{Config: cfg.Batch, DB: db.Namespace("batch/"), Dispatch: d, Logger: log, Metrics: metrics})
	if err != nil {
		return st, err
	}
	if err := st.life.start(ctx, "batches", batches.Start, batches.Close); err != nil {
		return st, err
	}
	if cfg.Batch.Intake.URL != "" {
		intake, err := batch.NewIntake(batches, cfg.Batch.Intake)
		if err != nil {
			return st, err
		}
		if err := st.life.start(ctx, "async intake", intake.Start, intake.Close); err != nil {
			return st, err
		}
	}

	cfg.Admin.ApplyEnv(os.Getenv)
	authn, err := auth.New(auth.Options{AdminToken: cfg.Admin.AdminToken, Logger: log})
	if err != nil {
		return st, err
	}
	adm, err := admin.New(ctx, admin.Deps{
		Store:    db.Namespace("m/admin/"),
		Keys:     authn,
		Flow:     flow,
		Registry: st.reg,
		Sessions: sess,
		Config:   cfg.Admin,
		Logger:   log,
		Metrics:  metrics,
	})
	if err != nil {
		return st, err
	}
	if cfg.State.Backend == state.BackendRedis {
		// Other gateways on the same Redis change tenants, keys and flow
		// control too: look for their changes until the store closes.
		watch, stopWatch := context.WithCancel(run)
		watched := make(chan struct{})
		st.life.start(ctx, "admin changes of other gateways", startNoErr(func() {
			go func() {
				defer close(watched)
				every(watch, admin.DefaultRefreshInterval, func() {
					if _, err := adm.Refresh(watch); err != nil && watch.Err() == nil {
						log.Warn("admin: reading other gateways' changes failed", "err", err)
					}
				})
			}()
		}), noErr(func() { stopWatch(); <-watched }))
	}
	if adm.HasLendSchedules() {
		// Lendable pools lent in scheduled windows: each window opens
		// within a second of its start.
		sched, stopSched := context.WithCancel(run)
		scheduled := make(chan struct{})
		st.life.start(ctx, "lending schedules", startNoErr(func() {
			apply := func() {
				if err := adm.ApplyLendSchedules(sched); err != nil && sched.Err() == nil {
					log.Warn("admin: lending on schedule failed", "err", err)
				}
			}
			apply()
			go func() {
				defer close(scheduled)
				every(sched, lendScheduleInterval, apply)
			}()
		}), noErr(func() { stopSched(); <-scheduled }))
	}
	if st.gw, err = gateway.New(gateway.Options{
		Registry:  st.reg,
		Dispatch:  d,
		Logger:    log,
		Metrics:   metrics,
		BodyLimit: cfg.BodyLimit,
		OpenAPI:   turnpike.Spec,
		Responses: svc,
		Batches:   batches,
		Auth:      authn,
		Admin:     adm,
		Tracer:    tracer,
		// Not ready while the store is down: the turns it would take
		// could not be stored.
		StoreHealth: db.Health,
	}); err != nil {
		return st, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return st, err
	}
	st.addr = ln.Addr().String()
	// The gateway stops first: it finishes in-flight requests, streams
	// included, while everything under it still runs.
	st.life.start(ctx, "gateway", func(context.Context) error {
		go func() {
			err := st.gw.Serve(ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			st.served <- err
		}()
		return nil
	}, st.gw.Shutdown)
	return st, nil
}

// stateWhere says where the state store is, for logs and errors.
func stateWhere(cfg *Config) string {
	if cfg.State.Backend == state.BackendRedis {
		return "redis at " + state.RedactURL(cfg.State.URL)
	}
	return "pebble in " + cfg.DataDir
}

// simPool is the pool config, named name with role role ("" for both),
// that serves a simulated fleet.
func simPool(simCfg *sim.Config, fleet *sim.Fleet, name, role string) pools.PoolConfig {
	pc := simPoolOf(simCfg, name, role)
	for i, u := range fleet.URLs {
		pc.Endpoints = append(pc.Endpoints, pools.EndpointConfig{URL: u, KVEvents: fleet.Engines[i].KVEventsAddr()})
	}
	return pc
}

// simPoolOf is the pool config of simulated engines configured by simCfg,
// without its endpoints.
func simPoolOf(simCfg *sim.Config, name, role string) pools.PoolConfig {
	return pools.PoolConfig{
		Name:         name,
		Engine:       simCfg.Flavor,
		Accelerator:  simCfg.Accelerator,
		Model:        simCfg.Model,
		ServedModels: []string{simCfg.ServedModelName},
		Role:         role,
		// The engines' policy, which the pool's config states.
		PriorityScheduling: simCfg.SchedulingPolicy == sim.SchedulingPriority,
	}
}

// startNoErr adapts a start that cannot fail.
func startNoErr(f func()) func(context.Context) error {
	return func(context.Context) error { f(); return nil }
}

// Close shuts the gateway down gracefully, then everything under it, in
// the reverse of the order it started.
func (st *stack) Close(ctx context.Context) error { return st.life.close(ctx) }

func printDemo(w io.Writer, st *stack, sf *simFlags, stateAt string) {
	base := "http://" + st.addr
	flavor, accelerator := sf.flavor, sf.accelerator
	if sf.topology == topologyMixed {
		flavor, accelerator = "vllm and vllm-tpu", "h200 and tpu-v6e"
	}
	fmt.Fprintf(w, `turnpike is serving on %[1]s
  embedded fleet: %[2]d simulated %[3]s replicas of %[4]s on %[5]s (time scale %[6]g)
  state: %[8]s; metrics at %[1]s/metrics

Try it:
  curl %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%[7]s","messages":[{"role":"user","content":"Hello!"}]}'

  curl -N %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%[7]s","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'

  curl %[1]s/v1/responses -H 'Content-Type: application/json' \
    -d '{"model":"%[7]s","input":"Hello!"}'

OpenAI SDKs: base URL %[1]s/v1, any API key.
Stop with Ctrl-C.
`, base, sf.replicas, flavor, sf.model, accelerator, sf.timeScale, sf.served, stateAt)
	if st.fleet != nil && len(st.fleet.pools) > 1 && st.fleet.pools[0].Role != pools.RolePrefill {
		fmt.Fprintf(w, "\nmixed topology: pool %s (%d × %s) and pool %s (%d × %s) serve one model; the cost-aware policy (--policy cost-aware) sends each turn to the cheaper one while it meets the TTFT target.\n",
			st.fleet.pools[0].Name, len(st.fleet.pools[0].Endpoints), st.fleet.pools[0].Accelerator, st.fleet.pools[1].Name, len(st.fleet.pools[1].Endpoints), st.fleet.pools[1].Accelerator)
	} else if st.fleet != nil && len(st.fleet.pools) > 1 {
		fmt.Fprintf(w, "\nP/D topology: pools %s (%d) and %s (%d); long prompts are prefilled on the first and decoded on the second (see turnpike_pd_decisions_total).\n",
			st.fleet.pools[0].Name, len(st.fleet.pools[0].Endpoints), st.fleet.pools[1].Name, len(st.fleet.pools[1].Endpoints))
	}
}

// interactiveLane is the routing policy's interactive lane as admission
// sees it: the cache-aware policy's interactive-lane filter, when it runs.
func interactiveLane(rc *affinity.Config) turns.Lane {
	if rc.Policy != affinity.PolicyCacheAware || rc.InteractiveLane <= 0 || !slices.Contains(rc.Filters, affinity.FilterInteractiveLane) {
		return turns.Lane{}
	}
	return turns.Lane{Endpoints: rc.InteractiveLane, MinFleet: affinity.DefaultInteractiveLaneMinFleet, Hold: rc.InteractiveLaneHold}
}

// subscriptionsStop bounds the wait for the KV subscriptions to end at
// shutdown: each ends as soon as its socket sees its context done.
const subscriptionsStop = 5 * time.Second

// waitGroup waits for wg, at most for d or until ctx is done.
func waitGroup(ctx context.Context, wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}
