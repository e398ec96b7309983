package pools

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/turnpike-gateway/turnpike/accelerators"
	"github.com/turnpike-gateway/turnpike/internal/wait"
)

// Registry is the fleet: every pool and endpoint from the config. The set
// of pools and endpoints is fixed for the registry's life; their state
// changes.
type Registry struct {
	Pools []*Pool
	// Endpoints lists every endpoint of every pool; Endpoint.Index is the
	// position here.
	Endpoints []*Endpoint

	opts   Options
	log    *slog.Logger
	client *Client

	// onLoad, when set before Start, sees every new load snapshot.
	onLoad func(*Endpoint, Load)

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// OnLoad registers fn to be called, from the scraper's goroutine, with
// every new load snapshot of every endpoint; the KV index uses it to
// mirror each engine's real cache capacity. Call before Start.
func (r *Registry) OnLoad(fn func(*Endpoint, Load)) { r.onLoad = fn }

// NewRegistry builds the fleet from validated pool configs and options.
// Endpoints start healthy so that a fleet serves before its first health
// check; the checker corrects that within HealthFailures intervals, or one
// when nothing listens.
func NewRegistry(pcs []PoolConfig, opts Options, log *slog.Logger) (*Registry, error) {
	opts.EnsureDefaults()
	if err := errors.Join(ValidatePools(pcs), opts.Validate()); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Registry{opts: opts, log: log, stop: make(chan struct{})}
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
		for _, ec := range pc.Endpoints {
			u, err := url.Parse(ec.URL)
			if err != nil {
				return nil, fmt.Errorf("pools: endpoint %q: %w", ec.URL, err)
			}
			ep := &Endpoint{
				ID:            u.Host,
				URL:           u,
				KVEvents:      ec.KVEvents,
				BootstrapPort: cmp.Or(ec.BootstrapPort, DefaultBootstrapPort),
				Pool:          p,
				Index:         len(r.Endpoints),
				staleAfter:    opts.StaleAfter,
			}
			ep.breaker = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
				Name:        u.Host,
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
			p.Endpoints = append(p.Endpoints, ep)
			r.Endpoints = append(r.Endpoints, ep)
		}
		r.Pools = append(r.Pools, p)
	}
	r.client = newClient(opts)
	return r, nil
}

// Options returns the registry's options with defaults applied.
func (r *Registry) Options() Options { return r.opts }

// Client is the engine client shared by the fleet.
func (r *Registry) Client() *Client { return r.client }

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

// EndpointsFor appends to dst every endpoint of every pool serving model
// with a role that can take a whole request or a decode leg (both,
// decode), and returns it.
func (r *Registry) EndpointsFor(dst []*Endpoint, model string) []*Endpoint {
	for _, p := range r.Pools {
		if p.Config.Role != RolePrefill && p.Serves(model) {
			dst = append(dst, p.Endpoints...)
		}
	}
	return dst
}

// PrefillEndpointsFor appends to dst every endpoint of the prefill pools
// serving model, and returns it.
func (r *Registry) PrefillEndpointsFor(dst []*Endpoint, model string) []*Endpoint {
	for _, p := range r.Pools {
		if p.Config.Role == RolePrefill && p.Serves(model) {
			dst = append(dst, p.Endpoints...)
		}
	}
	return dst
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

// Models lists the union of the pools' served model names, sorted.
func (r *Registry) Models() []string {
	var out []string
	for _, p := range r.Pools {
		for _, m := range p.Config.ServedModels {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Endpoint finds an endpoint by ID.
func (r *Registry) Endpoint(id string) (*Endpoint, bool) {
	for _, ep := range r.Endpoints {
		if ep.ID == id {
			return ep, true
		}
	}
	return nil, false
}

// Start launches the scraper and health checker of every endpoint. They
// run until Close, whatever becomes of ctx.
func (r *Registry) Start(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	for _, ep := range r.Endpoints {
		r.wg.Add(2)
		go func() { defer r.wg.Done(); r.scrapeLoop(ctx, ep) }()
		go func() { defer r.wg.Done(); r.healthLoop(ctx, ep) }()
	}
	return nil
}

// Close stops the background loops and waits for them, up to ctx.
func (r *Registry) Close(ctx context.Context) error {
	r.once.Do(func() { close(r.stop) })
	if err := wait.Group(ctx, &r.wg); err != nil {
		return fmt.Errorf("pools: close: %w", err)
	}
	r.client.http.CloseIdleConnections()
	return nil
}

// every runs fn now and then every d until the registry closes.
func (r *Registry) every(d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		fn()
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}
