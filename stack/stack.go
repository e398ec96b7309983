package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/turnpike-gateway/turnpike/budgets"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/gateway"
	"github.com/turnpike-gateway/turnpike/gossip"
	"github.com/turnpike-gateway/turnpike/guard"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/models"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/tracing"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Options are what a Stack takes beside its config.
type Options struct {
	// Logger receives every component's logs. Nil discards them.
	Logger *slog.Logger
	// Fleet, when set, is a simulated fleet that Start starts first and
	// whose pools the gateway serves instead of the config's: the
	// embedded demo fleet and the benchmarks' backend.
	Fleet *sim.Topology
	// ConfigPath is the file the config was read from, which Reload reads
	// again, at SIGHUP and whenever it changes (watched from Start). ""
	// means none: nothing reloads, and the routing policy is built once.
	ConfigPath string
	// Adjust, when set, is laid over every config read from ConfigPath
	// on reload, as it was over the first: the command line's flags, which
	// keep winning over the file.
	Adjust func(*Config)
	// After is the clock Shutdown waits server.shutdownDelay on; nil
	// means time.After. Tests release the delay themselves.
	After func(time.Duration) <-chan time.Time
}

// Stack is one gateway built from its config: every component, started
// in dependency order and closed in reverse.
type Stack struct {
	// cfg is the running config: guarded by reload.mu once started.
	cfg      Config
	log      *slog.Logger
	topology *sim.Topology
	after    func(time.Duration) <-chan time.Time
	reload   reloader

	// Set by Start.
	fleet *sim.Fleets
	reg   *pools.Registry
	index *kv.Index
	gw    *gateway.Server
	// life stops what Start started, in reverse order.
	life lifecycle
}

// New checks cfg (a copy of which the stack keeps) and builds the stack;
// nothing starts until Start. With an embedded fleet, the pools are
// checked once the fleet has started and given them.
func New(cfg *Config, opts Options) (*Stack, error) {
	s := &Stack{cfg: *cfg, log: opts.Logger, topology: opts.Fleet, after: opts.After}
	s.reload.path, s.reload.adjust = opts.ConfigPath, opts.Adjust
	if s.after == nil {
		s.after = time.After
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.life.log = s.log
	if s.topology == nil {
		if err := s.cfg.Validate(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Addr is the address the gateway listens on, once started.
func (s *Stack) Addr() string {
	if s.gw == nil {
		return ""
	}
	return s.gw.Addr()
}

// Fleet is the embedded simulated fleet, once started; nil without one.
func (s *Stack) Fleet() *sim.Fleets { return s.fleet }

// Pools are the pools the gateway serves: the config's, or the embedded
// fleet's once started.
func (s *Stack) Pools() []pools.PoolConfig {
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	return s.cfg.Pools
}

// Registry is the gateway's view of its pools, once started.
func (s *Stack) Registry() *pools.Registry { return s.reg }

// Index is the gateway's KV-cache index, once started.
func (s *Stack) Index() *kv.Index { return s.index }

// Served delivers the gateway's error if it stops serving before Close;
// it may be read once Start has returned.
func (s *Stack) Served() <-chan error { return s.gw.Served() }

// Start builds each component on those started before it and starts it:
// the one place the order lives, phase by phase. Components run until
// Close, not until ctx ends: a signal starts a graceful Close, in which
// the gateway finishes its streams before the engines and stores under it
// stop. On an error, what had started is closed.
func (s *Stack) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			s.Close(context.Background())
		}
	}()
	if err := s.startFleet(ctx); err != nil {
		return err
	}
	p := &parts{metrics: prometheus.NewRegistry()}
	p.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, phase := range []func(context.Context, *parts) error{
		s.startFleetView, // pools, the KV-cache index and its KV event subscriptions
		s.startState,     // tracing, the state store, routing records shared, sessions
		s.startTurnPath,  // routing, load shared, flow control, dispatch
		s.startAPIs,      // Responses, batches, admin, and last the HTTP gateway
	} {
		if err := phase(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// parts are what the phases of Start build and hand on to the next.
type parts struct {
	metrics *prometheus.Registry
	index   *kv.Index
	hasher  *kv.Hasher
	// names are the endpoints' ids, by index.
	names  []string
	tracer *tracing.Tracer
	gossip *gossip.Metrics
	db     *state.DB
	sess   *sessions.Store
	// view keeps the KV index and the session pins in step with the fleet.
	view *fleetView
	flow *turns.Controller
	d    *dispatch.Dispatcher
}

// startFleet starts the embedded simulated fleet, when there is one, and
// serves its pools.
func (s *Stack) startFleet(ctx context.Context) error {
	if s.topology == nil {
		return nil
	}
	cfg := &s.cfg
	s.fleet = s.topology.Fleets()
	if err := s.life.start(ctx, "simulated fleet", s.fleet); err != nil {
		return err
	}
	cfg.Pools = SimPools(s.fleet, s.topology.TokenizerDir)
	s.fleetRouting(cfg)
	return cfg.Validate()
}

// fleetRouting adapts routing to the embedded fleet's engines.
func (s *Stack) fleetRouting(cfg *Config) {
	if s.topology.Config.SchedulingPolicy == sim.SchedulingPriority && cfg.Routing.InteractiveLane == affinity.DefaultInteractiveLane {
		// Engines that take interactive turns ahead of the rest need no
		// endpoint kept for them.
		cfg.Routing.InteractiveLane = -1
	}
}

// startFleetView starts the pools' scrapes and health checks, and the
// KV-cache index that mirrors each engine's cache: bounded by the capacity
// the engine reports, fed by routing and by KV events.
func (s *Stack) startFleetView(ctx context.Context, p *parts) (err error) {
	cfg, log := &s.cfg, s.log
	if s.reg, err = pools.NewRegistry(cfg.Pools, cfg.Fleet, log); err != nil {
		return err
	}
	index := kv.NewIndex(kv.IndexOptions{MaxCapacity: cfg.Routing.KVIndexMaxBlocks})
	s.index, p.index, p.hasher = index, index, &kv.Hasher{}
	s.reg.OnLoad(func(ep *pools.Endpoint, l pools.Load) {
		if l.NumGPUBlocks > 0 && (l.BlockSize == 0 || l.BlockSize == kv.DefaultBlockSize) {
			index.SetCapacity(ep.Index, l.NumGPUBlocks)
		}
	})
	kvMetrics := kv.NewCollector(index, nil)
	p.metrics.MustRegister(kvMetrics, s.reg.Collector())
	view := newFleetView(s.reg, index, p.hasher, kvMetrics, log)
	p.view = view
	if err := s.life.start(ctx, "pools", s.reg); err != nil {
		return err
	}
	// The routing records shared with other gateways name the endpoints
	// of the fleet as it started.
	for _, ep := range s.reg.Endpoints() {
		if ep.Index >= len(p.names) {
			p.names = append(p.names, make([]string, ep.Index+1-len(p.names))...)
		}
		p.names[ep.Index] = ep.ID
	}
	// The KV subscriptions end before the engines they follow (the
	// embedded fleet stops after this): an engine's stream closing under
	// a live subscription reads as an interrupted one.
	return s.life.start(ctx, "KV event subscriptions", view)
}

// startState starts tracing, opens the state store, shares routing
// records with the other gateways on it, and starts sessions.
func (s *Stack) startState(ctx context.Context, p *parts) error {
	cfg, log := &s.cfg, s.log
	// Traces, when an OTLP endpoint is configured; closed late, so that
	// the spans of the requests the gateway finishes are flushed.
	traces, err := tracing.New(ctx, cfg.Tracing, p.metrics, log)
	if err != nil {
		return err
	}
	if err := s.life.start(ctx, "tracing", traces); err != nil {
		return err
	}
	p.tracer = traces.Tracer()
	if p.tracer.On() {
		log.Info("tracing on", "service", cfg.Tracing.ServiceName, "endpoint", cmp.Or(cfg.Tracing.Endpoint, "from the environment"))
	}

	// One state store, Pebble under the data dir or a shared Redis, and a
	// namespace in it for each owner. The prefixes are those the data dir
	// has always been written with.
	if p.db, err = state.Open(ctx, cfg.State, cfg.DataDir, log); err != nil {
		return fmt.Errorf("open state store (%s): %w", cfg.Where(), err)
	}
	s.life.opened("state store", p.db.Close)
	if c := p.db.Collector(); c != nil {
		p.metrics.MustRegister(c)
	}
	if err := s.startRoutePeers(ctx, p); err != nil {
		return err
	}

	sessOpts := cfg.Sessions
	sessOpts.Metrics, sessOpts.Logger = p.metrics, log
	if cfg.State.Backend == state.BackendRedis && sessOpts.PinRefresh == 0 {
		// Other gateways pin sessions too: look at their pins.
		sessOpts.PinRefresh = sessions.DefaultSharedPinRefresh
	}
	pins := sessions.NewAsyncPinStore(&sessions.KVPinStore{Namespace: p.db.Namespace("m/sessions/")}, 0,
		func(err error) { log.Warn("session pin not saved", "err", err) })
	sessOpts.Pins = pins
	if p.sess, err = sessions.NewStore(sessOpts); err != nil {
		return err
	}
	p.view.setSessions(p.sess)
	if err := s.life.start(ctx, "session pin writer", pins); err != nil {
		return err
	}
	return s.life.start(ctx, "sessions", p.sess)
}

// startTurnPath builds the routing policy, shares the load with the other
// gateways, starts flow control and builds the dispatcher of every turn.
func (s *Stack) startTurnPath(ctx context.Context, p *parts) error {
	cfg, log := &s.cfg, s.log
	cfg.Routing.TierWeights = catalogTierWeights(cfg.Routing.TierWeights, cfg.Pools)
	deps := affinity.Deps{Index: p.index, Hasher: p.hasher, Sessions: p.sess, Metrics: p.metrics}
	policy, err := affinity.NewPolicy(cfg.Routing.Config, deps)
	if err != nil {
		return err
	}
	if s.reload.path != "" {
		// A reload may replace the policy while turns run.
		s.reload.policy, s.reload.policyDeps = affinity.NewReloadable(policy), deps
		policy = s.reload.policy
	}
	if p.gossip, err = gossip.NewMetrics(p.metrics); err != nil {
		return err
	}
	if err := s.startLoadShare(ctx, p); err != nil {
		return err
	}
	if p.flow, err = turns.New(turns.Config{FlowControl: cfg.FlowControl}, turns.WithRegisterer(p.metrics)); err != nil {
		return err
	}
	if err := s.life.start(ctx, "flow control", p.flow); err != nil {
		return err
	}
	toks, err := modelTokenizers(cfg.Pools, p.metrics)
	if err != nil {
		return err
	}
	rewrites, err := models.New(cfg.Models)
	if err != nil {
		return err
	}
	check, err := guard.New(cfg.Guard, p.metrics)
	if err != nil {
		return err
	}
	// The tenants' budgets a minute are kept in the state store: gateways
	// sharing a Redis share them.
	ledger, err := budgets.New(budgets.Options{Store: p.db.Namespace("m/budgets/"), Metrics: p.metrics, Logger: log})
	if err != nil {
		return err
	}
	revisions, err := affinity.NewRevisions(cfg.Routing.Revisions)
	if err != nil {
		return err
	}
	p.d, err = dispatch.New(dispatch.Options{Registry: s.reg, Policy: policy, Sessions: p.sess, Flow: p.flow, Lane: interactiveLane(&cfg.Routing.Config),
		Hasher: p.hasher, Tokenizers: toks, Logger: log, Metrics: p.metrics, PD: &cfg.Routing.PD, Tracer: p.tracer, Models: rewrites, Guard: check,
		Budgets: ledger, Revisions: revisions, HandOff: &cfg.Routing.HandOff})
	s.reload.dispatch = p.d
	if err != nil {
		return err
	}
	d := p.d
	p.view.setHandOff(func(ctx context.Context, ep *pools.Endpoint) { d.HandOff(ctx, ep) })
	return nil
}

// startAPIs starts the APIs' services, Responses, batches and admin, and
// last the HTTP gateway in front of them.
func (s *Stack) startAPIs(ctx context.Context, p *parts) error {
	cfg, log := &s.cfg, s.log
	// Background jobs stop before flow control closes: they stay pending
	// for the next start instead of failing on a closing controller.
	rc := cfg.Responses
	rc.FlushInterval = cfg.Server.FlushInterval
	rc.Metrics, rc.Logger, rc.Tracer = p.metrics, log, p.tracer
	svc := responses.New(responses.NewStore(p.db.Namespace("rs/"), responses.StoreOptions{TTL: rc.Retention}), p.d, rc)
	if err := s.life.start(ctx, "responses", svc); err != nil {
		return err
	}
	if err := s.startHeldShare(ctx, p, svc); err != nil {
		return err
	}

	// Batches run on flow control's lowest band: they stop before it
	// closes, and what was in flight runs again at the next start.
	batches, err := batch.New(batch.Options{Config: cfg.Batch, DB: p.db.Namespace("batch/"), Dispatch: p.d, Logger: log, Metrics: p.metrics})
	if err != nil {
		return err
	}
	if err := s.life.start(ctx, "batches", batches); err != nil {
		return err
	}
	if cfg.Batch.Intake.URL != "" {
		intake, err := batch.NewIntake(batches, cfg.Batch.Intake)
		if err != nil {
			return err
		}
		if err := s.life.start(ctx, "async intake", intake); err != nil {
			return err
		}
	}

	cfg.Admin.ApplyEnv(os.Getenv)
	authn, err := auth.New(auth.Options{AdminToken: cfg.Admin.AdminToken, Logger: log})
	if err != nil {
		return err
	}
	admDeps := admin.Deps{
		Store:    p.db.Namespace("m/admin/"),
		Keys:     authn,
		Flow:     p.flow,
		Registry: s.reg,
		Sessions: p.sess,
		// The canary weights the dispatcher assigns new sessions by.
		Revisions: p.d.Revisions(),
		Config:    cfg.Admin,
		Logger:    log,
		Metrics:   p.metrics,
		CacheAccuracy: func(ep *pools.Endpoint) (admin.EndpointCache, bool) {
			a, ok := p.d.CacheAccuracy(ep)
			return admin.EndpointCache(a), ok
		},
	}
	if cfg.State.Backend == state.BackendRedis {
		// Other gateways on the same Redis change tenants, keys and flow
		// control too: look for their changes until the store closes.
		admDeps.RefreshInterval = admin.DefaultRefreshInterval
	}
	adm, err := admin.New(ctx, admDeps)
	if err != nil {
		return err
	}
	if err := s.life.start(ctx, "admin", adm); err != nil {
		return err
	}
	s.reload.adm = adm
	s.reload.register(p.metrics)
	if s.gw, err = gateway.New(gateway.Options{
		Addr:            cfg.Addr,
		ShutdownTimeout: cfg.Server.ShutdownTimeout,
		Registry:        s.reg,
		Dispatch:        p.d,
		Logger:          log,
		Metrics:         p.metrics,
		BodyLimit:       cfg.BodyLimit,
		BodyBudget:      cfg.bodyBudget(),
		PromptMemoBytes: cfg.PromptMemoBytes,
		OpenAPI:         turnpike.Spec,
		Responses:       svc,
		Batches:         batches,
		Auth:            authn,
		Admin:           adm,
		Tracer:          p.tracer,
		// Not ready while the store is down: the turns it would take
		// could not be stored.
		StoreHealth: p.db.Health,
		// Answers kept for Idempotency-Key retries: in Redis, a retry
		// that lands on another gateway finds them too.
		Idempotency:    p.db.Records("idempotency"),
		IdempotencyTTL: cfg.Server.IdempotencyTTL,
		FlushInterval:  cfg.Server.FlushInterval,
	}); err != nil {
		return err
	}
	// The gateway stops first: it finishes in-flight requests, streams
	// included, while everything under it still runs.
	if err := s.life.start(ctx, "gateway", s.gw); err != nil {
		return err
	}
	s.reload.mu.Lock()
	s.reload.mu.loadedAt = time.Now()
	s.reload.lastGood.Set(float64(s.reload.mu.loadedAt.UnixNano()) / 1e9)
	s.publishStatusLocked()
	s.reload.mu.Unlock()
	if s.reload.path == "" {
		return nil
	}
	// Last started, first closed: no reload runs while the stack stops.
	return s.life.start(ctx, "config file watch", &configWatch{s: s})
}

// Close shuts the gateway down gracefully, then everything under it, in
// the reverse of the order it started.
func (s *Stack) Close(ctx context.Context) error { return s.life.close(ctx) }

// Shutdown is the graceful stop at SIGTERM. /readyz answers 503 at once
// while the gateway serves every request as before, for
// server.shutdownDelay, so that load balancers stop sending it new ones;
// then Close: the gateway stops accepting, finishes in-flight requests,
// streams included, within server.shutdownTimeout, and everything under
// it stops. ctx ending cuts the delay short, not the drain.
func (s *Stack) Shutdown(ctx context.Context) error {
	s.reload.mu.Lock()
	delay := s.cfg.Server.delay()
	s.reload.mu.Unlock()
	if s.gw != nil {
		s.gw.Drain()
		s.log.Info("shutting down: /readyz fails; serving on while load balancers notice", "delay", delay)
		if delay > 0 {
			select {
			case <-s.after(delay):
			case <-ctx.Done():
			}
		}
		s.log.Info("shutting down: no new connections; finishing in-flight requests")
	}
	return s.Close(context.WithoutCancel(ctx))
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

// subscriptions are the KV event subscriptions, one for each endpoint that
// publishes KV events: started together, and closed together within
// subscriptionsStop.
type subscriptions []*kv.Subscriber

func (ss subscriptions) Start(ctx context.Context) error {
	for _, sub := range ss {
		if err := sub.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (ss subscriptions) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, subscriptionsStop)
	defer cancel()
	errs := make([]error, len(ss))
	var wg sync.WaitGroup
	for i, sub := range ss {
		wg.Go(func() { errs[i] = sub.Close(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}
