package pools

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sony/gobreaker/v2"
	"github.com/turnpike-gateway/turnpike/accelerators"
	"github.com/turnpike-gateway/turnpike/internal/wait"
)

// Registry is the fleet: the config's pools, fixed for the registry's
// life, and their endpoints, which discovery sources add and remove while
// it runs (see Source). Readers take the current set from Endpoints,
// EndpointsFor and the like: an immutable snapshot, replaced whole on
// every change.
type Registry struct {
	Pools []*Pool

	opts   Options
	log    *slog.Logger
	client *Client

	// onLoad, when set before Start, sees every new load snapshot.
	onLoad func(*Endpoint, Load)
	// onJoin and onLeave, registered before Start, see each endpoint
	// join (those present at Start included) and leave once drained.
	onJoin, onLeave []func(*Endpoint)
	// onDrain, registered before Start, hear each endpoint start to
	// drain, in a goroutine of its own that wg counts.
	onDrain []func(context.Context, *Endpoint)

	// sources are the pools' discovery sources, one per pool, in pool
	// order; static ones have reported at New.
	sources []Source
	metrics *discoveryMetrics
	// wakers are the wake hooks of the pools that have one, by name.
	wakers map[string]*waker

	fleet atomic.Pointer[fleet]

	mu struct {
		sync.Mutex
		// protects the fields below
		byID map[string]*Endpoint
		// free are the indexes of endpoints that left and drained,
		// oldest first; next is the first index never given.
		free []int
		next int
		// ctx is the loops' context once started; nil before Start.
		ctx    context.Context
		closed bool
	}

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// fleet is one immutable snapshot of the endpoint set.
type fleet struct {
	all []*Endpoint
	// whole and prefill are, by model, the endpoints that take whole
	// requests or decode legs, and those that take prefill legs.
	whole, prefill map[string][]*Endpoint
	models         []string
	byID           map[string]*Endpoint
	// indexes is one more than the highest Index in the set.
	indexes int
}

// OnLoad registers fn to be called, from the scraper's goroutine, with
// every new load snapshot of every endpoint; the KV index uses it to
// mirror each engine's real cache capacity. Call before Start.
func (r *Registry) OnLoad(fn func(*Endpoint, Load)) { r.onLoad = fn }

// OnJoin registers fn to be called with every endpoint of the fleet: at
// Start with those present, later with each that joins, before it takes
// traffic. Calls may come from several goroutines at once. Call before
// Start.
func (r *Registry) OnJoin(fn func(*Endpoint)) { r.onJoin = append(r.onJoin, fn) }

// OnLeave registers fn to be called with each endpoint that left the
// fleet, once its in-flight requests have finished (or the registry
// closes): the KV index forgets it there, sessions unpin from it. Its
// Index is given to no other endpoint before fn returns. Call before
// Start.
func (r *Registry) OnLeave(fn func(*Endpoint)) { r.onLeave = append(r.onLeave, fn) }

// OnDrain registers fn to be called with each endpoint that starts to
// drain: drained by hand (Endpoint.SetDraining) or leaving the fleet. It
// is called at once, while the endpoint's in-flight requests still run,
// from a goroutine of its own, with a context that ends when the registry
// closes (Close waits for fn): the sessions pinned there are handed over
// from it. Call before Start.
func (r *Registry) OnDrain(fn func(context.Context, *Endpoint)) {
	r.onDrain = append(r.onDrain, fn)
}

// drainStarted runs the OnDrain hooks for ep in a goroutine, unless the
// registry has closed. The caller does not hold r.mu.
func (r *Registry) drainStarted(ep *Endpoint) {
	if len(r.onDrain) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainHooksLocked(ep)
}

// drainHooksLocked starts the OnDrain hooks for ep; the caller holds r.mu.
func (r *Registry) drainHooksLocked(ep *Endpoint) {
	if len(r.onDrain) == 0 || r.mu.closed {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-r.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		for _, fn := range r.onDrain {
			fn(ctx, ep)
		}
	}()
}

// NewRegistry builds the fleet from validated pool configs and options.
// Static pools' endpoints are there at once, and start healthy so that a
// fleet serves before its first health check; the checker corrects that
// within HealthFailures intervals, or one when nothing listens. Other
// sources report at Start.
func NewRegistry(pcs []PoolConfig, opts Options, log *slog.Logger) (*Registry, error) {
	opts.EnsureDefaults()
	if err := errors.Join(ValidatePools(pcs), opts.Validate()); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Registry{opts: opts, log: log, stop: make(chan struct{}), metrics: newDiscoveryMetrics()}
	r.mu.byID = map[string]*Endpoint{}
	r.fleet.Store(&fleet{})
	for _, pc := range pcs {
		if pc.Engine == "" {
			pc.Engine = EngineVLLM
		}
		if pc.Role == "" {
			pc.Role = RoleBoth
		}
		p := &Pool{Config: pc}
		p.Model, _ = accelerators.LookupModel(pc.Model)
		p.Accelerator, _ = accelerators.LookupAccelerator(pc.Accelerator)
		p.eps.Store(&[]*Endpoint{})
		r.Pools = append(r.Pools, p)
		if pc.Wake != nil {
			if r.wakers == nil {
				r.wakers = map[string]*waker{}
			}
			r.wakers[pc.Name] = newWaker(&p.Config, r.metrics.wakes)
		}
	}
	for _, p := range r.Pools {
		src, err := r.newSource(p)
		if err != nil {
			return nil, err
		}
		if s, ok := src.(*staticSource); ok {
			if err := s.start(&p.Config, poolSink{r, p}); err != nil {
				return nil, err
			}
		}
		r.sources = append(r.sources, src)
	}
	r.client = newClient(opts)
	return r, nil
}

// newSource builds pool p's discovery source from its config.
func (r *Registry) newSource(p *Pool) (Source, error) {
	d := p.Config.Discovery
	switch d.kind() {
	case DiscoveryFile:
		return NewFileSource(p.Config.Name, d.Path, d.scheme(), r.log, r.metrics), nil
	case DiscoveryKubernetes:
		return NewKubernetesSource(p.Config.Name, *d, r.log, r.metrics)
	default:
		return newStaticSource(&p.Config)
	}
}

// SetEndpoints replaces the endpoints list of the static pool named pool,
// as a reload of the config file does: an endpoint no longer listed leaves
// and drains as one that discovery lost, a new one joins and takes traffic
// after its first good scrape, one listed before and now is untouched.
// The list must have passed ValidatePools. A pool of another discovery
// kind follows its source, not a list.
func (r *Registry) SetEndpoints(pool string, eps []EndpointConfig) error {
	for i, p := range r.Pools {
		if p.Config.Name != pool {
			continue
		}
		s, ok := r.sources[i].(*staticSource)
		if !ok {
			return fmt.Errorf("pools: pool %q discovers its endpoints (kind %s): it has no list to set", pool, p.Config.Discovery.kind())
		}
		// Pool.Config stays the config the pool started with: it is read
		// without a lock, and the endpoint set is the snapshot's anyway.
		return s.set(pool, eps)
	}
	return fmt.Errorf("pools: no pool %q", pool)
}

// Collector exports discovery's counters: entries skipped as bad, sources
// that kept their last good set, endpoints that joined and left.
func (r *Registry) Collector() prometheus.Collector { return r.metrics }

// Options returns the registry's options with defaults applied.
func (r *Registry) Options() Options { return r.opts }

// Client is the engine client shared by the fleet.
func (r *Registry) Client() *Client { return r.client }

// Endpoints is the current endpoint set of every pool, in pool order. The
// slice is a snapshot: do not modify it.
func (r *Registry) Endpoints() []*Endpoint { return r.fleet.Load().all }

// PoolsFor returns the pools that serve model, in config order.
func (r *Registry) PoolsFor(model string) []*Pool {
	var out []*Pool
	for _, p := range r.Pools {
		if p.Serves(model) {
			out = append(out, p)
		}
	}
	return out
}

// EndpointsFor appends to dst every endpoint serving model with a role
// that can take a whole request or a decode leg (both, decode), and
// returns it.
func (r *Registry) EndpointsFor(dst []*Endpoint, model string) []*Endpoint {
	return append(dst, r.fleet.Load().whole[model]...)
}

// Serving is EndpointsFor's set without a copy: the current snapshot's
// endpoints serving model whole. Do not modify it.
func (r *Registry) Serving(model string) []*Endpoint { return r.fleet.Load().whole[model] }

// PrefillEndpointsFor appends to dst every prefill endpoint serving model,
// and returns it.
func (r *Registry) PrefillEndpointsFor(dst []*Endpoint, model string) []*Endpoint {
	return append(dst, r.fleet.Load().prefill[model]...)
}

// Disaggregated reports whether model has prefill pools and decode pools.
func (r *Registry) Disaggregated(model string) bool {
	var prefill, decode bool
	for _, p := range r.Pools {
		if p.Serves(model) {
			prefill = prefill || p.Config.Role == RolePrefill
			decode = decode || p.Config.Role == RoleDecode
		}
	}
	return prefill && decode
}

// Models lists the model names the fleet serves, sorted: the pools'
// served models and those endpoints' labels add.
func (r *Registry) Models() []string {
	var out []string
	for _, p := range r.Pools {
		for _, m := range p.Config.ServedModels {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	for _, m := range r.fleet.Load().models {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// Endpoint finds an endpoint of the current set by ID.
func (r *Registry) Endpoint(id string) (*Endpoint, bool) {
	ep, ok := r.fleet.Load().byID[id]
	return ep, ok
}

// upsert is Sink.Upsert for pool p.
func (r *Registry) upsert(p *Pool, t Target) {
	t.Labels.Pool = p.Config.Name
	id := t.ID()
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return
	}
	old, ok := r.mu.byID[id]
	if ok && old.Pool != p {
		r.mu.Unlock()
		r.metrics.badEntries.WithLabelValues(p.Config.Name).Inc()
		r.log.Warn("discovery: endpoint already in another pool, skipped", "pool", p.Config.Name, "endpoint", id, "other_pool", old.Pool.Config.Name)
		return
	}
	if ok && old.URL.String() == t.URL.String() && old.KVEvents == t.KVEvents {
		if !old.Labels().equal(t.Labels) {
			old.labels.Store(&t.Labels)
			r.publishLocked()
		}
		r.mu.Unlock()
		return
	}
	if ok {
		// The same host:port under another scheme or KV event address: a
		// new engine as far as routing knows.
		r.leaveLocked(old)
	}
	ep := r.newEndpointLocked(p, t)
	ctx := r.mu.ctx
	if ctx != nil {
		// It joins a running fleet: no traffic before a good scrape.
		ep.joining.Store(true)
	}
	r.mu.byID[id] = ep
	r.mu.Unlock()

	// The hooks run before the endpoint is in a snapshot: the KV index
	// knows it before routing can pick it.
	if ctx != nil {
		for _, fn := range r.onJoin {
			fn(ep)
		}
		r.startLoops(ctx, ep)
		r.log.Info("endpoint joined", "pool", p.Config.Name, "endpoint", id, "role", ep.Role(), "revision", ep.Labels().Revision)
	}
	r.metrics.changes.WithLabelValues(p.Config.Name, "join").Inc()
	r.mu.Lock()
	if r.mu.byID[id] == ep {
		r.publishLocked()
	}
	r.mu.Unlock()
}

// remove is Sink.Delete for pool p.
func (r *Registry) remove(p *Pool, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ep, ok := r.mu.byID[id]
	if !ok || ep.Pool != p || r.mu.closed {
		return
	}
	r.leaveLocked(ep)
}

// leaveLocked takes ep out of the fleet: out of the snapshot (no new
// turns), draining for those that hold it, its loops stopped; a goroutine
// waits for its in-flight requests, then runs the OnLeave hooks and
// frees its index.
func (r *Registry) leaveLocked(ep *Endpoint) {
	delete(r.mu.byID, ep.ID)
	if !ep.draining.Swap(true) {
		r.drainHooksLocked(ep)
	}
	close(ep.gone)
	r.publishLocked()
	r.metrics.changes.WithLabelValues(ep.Pool.Config.Name, "leave").Inc()
	r.log.Info("endpoint left; draining", "pool", ep.Pool.Config.Name, "endpoint", ep.ID, "in_flight", ep.OwnInFlight())
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.drain(ep)
	}()
}

// drain waits for ep's in-flight requests to finish, checking every
// scrape interval, then forgets it.
func (r *Registry) drain(ep *Endpoint) {
	t := time.NewTicker(r.opts.ScrapeInterval)
	defer t.Stop()
wait:
	for ep.OwnInFlight() > 0 {
		select {
		case <-r.stop:
			break wait
		case <-t.C:
		}
	}
	for _, fn := range r.onLeave {
		fn(ep)
	}
	r.mu.Lock()
	r.mu.free = append(r.mu.free, ep.Index)
	r.mu.Unlock()
	close(ep.drained)
	r.log.Info("endpoint drained", "pool", ep.Pool.Config.Name, "endpoint", ep.ID)
}

// newEndpointLocked builds the endpoint t names in pool p, with the
// oldest free index, or a new one.
func (r *Registry) newEndpointLocked(p *Pool, t Target) *Endpoint {
	index := r.mu.next
	if len(r.mu.free) > 0 {
		index, r.mu.free = r.mu.free[0], r.mu.free[1:]
	} else {
		r.mu.next++
	}
	opts := r.opts
	ep := &Endpoint{
		ID:            t.ID(),
		URL:           t.URL,
		KVEvents:      t.KVEvents,
		BootstrapPort: cmp.Or(t.BootstrapPort, DefaultBootstrapPort),
		Pool:          p,
		Index:         index,
		staleAfter:    opts.StaleAfter,
		joined:        time.Now(),
		reg:           r,
		gone:          make(chan struct{}),
		drained:       make(chan struct{}),
	}
	ep.labels.Store(&t.Labels)
	log := r.log
	ep.breaker = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        ep.ID,
		MaxRequests: breakerTrials,
		Timeout:     opts.BreakerOpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= opts.BreakerFailures },
		// A client that went away says nothing about the engine.
		// Nor does lent work cut by a reclaim.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) || errors.Is(err, ErrReclaimed) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			log.Warn("endpoint breaker changed state", "endpoint", name, "from", from.String(), "to", to.String())
		},
	})
	ep.healthy.Store(true)
	return ep
}

// publishLocked builds and publishes the snapshot of the current set:
// the fleet's and each pool's, endpoints in pool order and, within a
// pool, by index.
func (r *Registry) publishLocked() {
	f := &fleet{whole: map[string][]*Endpoint{}, prefill: map[string][]*Endpoint{}, byID: make(map[string]*Endpoint, len(r.mu.byID))}
	for _, p := range r.Pools {
		var eps []*Endpoint
		for _, ep := range r.mu.byID {
			if ep.Pool == p {
				eps = append(eps, ep)
			}
		}
		slices.SortFunc(eps, func(a, b *Endpoint) int { return cmp.Compare(a.Index, b.Index) })
		p.eps.Store(&eps)
		f.all = append(f.all, eps...)
		for _, ep := range eps {
			f.byID[ep.ID] = ep
			f.indexes = max(f.indexes, ep.Index+1)
			for _, m := range ep.models() {
				if ep.Role() == RolePrefill {
					f.prefill[m] = append(f.prefill[m], ep)
				} else {
					f.whole[m] = append(f.whole[m], ep)
				}
				if !slices.Contains(f.models, m) {
					f.models = append(f.models, m)
				}
			}
			if ep.Role() != RolePrefill {
				for _, a := range ep.adapterNames() {
					f.whole[a] = append(f.whole[a], ep)
				}
			}
		}
	}
	r.fleet.Store(f)
}

// Start launches the scraper and health checker of every endpoint, then
// the discovery sources, each of which reports its first full set before
// Start returns. The loops run until Close, whatever becomes of ctx.
func (r *Registry) Start(ctx context.Context) error {
	loops := context.WithoutCancel(ctx)
	r.mu.Lock()
	r.mu.ctx = loops
	present := slices.Clone(r.Endpoints())
	r.mu.Unlock()
	for _, ep := range present {
		for _, fn := range r.onJoin {
			fn(ep)
		}
		r.startLoops(loops, ep)
	}
	for i, src := range r.sources {
		if _, ok := src.(*staticSource); ok {
			continue
		}
		if err := src.Start(ctx, poolSink{r, r.Pools[i]}); err != nil {
			return fmt.Errorf("pools: pool %q: %w", r.Pools[i].Config.Name, err)
		}
	}
	return nil
}

func (r *Registry) startLoops(ctx context.Context, ep *Endpoint) {
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.scrapeLoop(ctx, ep) }()
	go func() { defer r.wg.Done(); r.healthLoop(ctx, ep) }()
}

// Close stops the discovery sources and the background loops and waits
// for them, up to ctx.
func (r *Registry) Close(ctx context.Context) error {
	var errs []error
	for _, src := range r.sources {
		errs = append(errs, src.Close(ctx))
	}
	r.mu.Lock()
	r.mu.closed = true
	r.mu.Unlock()
	r.once.Do(func() { close(r.stop) })
	if err := wait.Group(ctx, &r.wg); err != nil {
		errs = append(errs, err)
	}
	r.client.http.CloseIdleConnections()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pools: close: %w", err)
	}
	return nil
}

// every runs fn now and then every d until the registry closes or ep
// leaves the fleet.
func (r *Registry) every(ep *Endpoint, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		fn()
		select {
		case <-r.stop:
			return
		case <-ep.gone:
			return
		case <-t.C:
		}
	}
}
