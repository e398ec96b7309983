package pools

import (
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/turnpike-gateway/turnpike/accelerators"
)

// Load is an immutable snapshot of what an endpoint's engine last reported
// about itself. A new snapshot replaces the old one on every scrape.
type Load struct {
	// Running and Waiting are the engine's running and queued requests.
	Running, Waiting int
	// KVUsage is the fraction of the engine's KV cache in use, 0..1.
	KVUsage float64
	// BlockSize and NumGPUBlocks describe the engine's KV cache when it
	// reports them (vllm:cache_config_info); zero when unknown.
	BlockSize, NumGPUBlocks int
	// MaxNumSeqs and MaxBatchedTokens are the engine scheduler's limits:
	// the most sequences it runs at once and the token budget of one step,
	// when it reports them (labels of the cache config info); zero when
	// unknown.
	MaxNumSeqs, MaxBatchedTokens int
	// PrefixQueries and PrefixHits are the engine's cumulative prefix-cache
	// counters, in tokens.
	PrefixQueries, PrefixHits float64
	// PromptTokens and GenerationTokens are cumulative token counters.
	PromptTokens, GenerationTokens float64
	// LoRA is what the engine says of its adapters; zero when it serves
	// none.
	LoRA LoRALoad
	// ScrapedAt is when this snapshot was taken; zero if never.
	ScrapedAt time.Time

	// answeredAt is the endpoint's progress count (Endpoint.answered)
	// when the snapshot was published (Endpoint.SetLoad).
	answeredAt int64
}

// KVTokens is the engine's KV cache in tokens, zero when unknown.
func (l *Load) KVTokens() int64 { return int64(l.BlockSize) * int64(l.NumGPUBlocks) }

// Endpoint is one engine replica. Create endpoints with NewRegistry; do not
// copy them.
type Endpoint struct {
	// ID is a short stable identifier (the URL's host:port).
	ID string
	// URL is the engine's base URL.
	URL *url.URL
	// KVEvents is the engine's KV event publisher address, or "".
	KVEvents string
	// BootstrapPort is the SGLang bootstrap port (EndpointConfig), its
	// default filled in.
	BootstrapPort int
	// Pool is the pool the endpoint belongs to.
	Pool *Pool
	// Index is a small number that no other endpoint of the fleet has
	// while this one is in it or draining; routing code uses it to index
	// caller-owned slices. Once the endpoint has left and drained, the
	// index may be given to one that joins later.
	Index int

	staleAfter time.Duration
	labels     atomic.Pointer[Labels]
	// joined is when the endpoint joined the fleet (was built); reg,
	// when built by a Registry, hears it start to drain.
	joined time.Time
	reg    *Registry
	// joining is set while an endpoint that joined a running fleet waits
	// for its first good scrape: until then it takes no traffic.
	joining atomic.Bool
	// gone is closed when the endpoint leaves the fleet (its loops stop),
	// drained once its in-flight requests have finished and it is
	// forgotten. Nil for an endpoint built outside a Registry.
	gone, drained chan struct{}
	load          atomic.Pointer[Load]
	healthy       atomic.Bool
	draining      atomic.Bool
	inFlight      atomic.Int64
	// inFlightTokens counts the prompt+expected output tokens of requests in
	// flight, as the gateway estimated them.
	inFlightTokens atomic.Int64
	// answered counts the engine's progress on this gateway's requests:
	// one when a request begins to answer (its first body bytes: a
	// finished prefill, which frees the step's token budget) and one when
	// it ends (its sequence and KV blocks freed); a request that ends
	// without answering counts both. After each the engine may start the
	// next request it queued.
	answered atomic.Int64
	// peers is the other gateways' load here (LoadShare), nil when none.
	peers atomic.Pointer[PeerLoad]
	// lora is what the gateway knows of the endpoint's adapters.
	lora adapterState

	breaker *gobreaker.CircuitBreaker[struct{}]
	// trials counts the requests in flight that the breaker let through
	// while half-open, from Send until the engine's answer decides them.
	trials atomic.Int32
}

// breakerTrials is how many trial requests a half-open breaker lets
// through at once; the first success closes it, a failure opens it again.
const breakerTrials = 1

// Load returns the last scraped load snapshot (zero Load if none yet).
func (e *Endpoint) Load() Load {
	if l := e.load.Load(); l != nil {
		return *l
	}
	return Load{}
}

// SetLoad publishes a new load snapshot. Used by the scraper and by tests.
func (e *Endpoint) SetLoad(l Load) {
	l.answeredAt = e.answered.Load()
	e.load.Store(&l)
}

// Stale reports whether the load snapshot is older than the staleness bound
// (or missing), so routing and admission should not trust it.
func (e *Endpoint) Stale(now time.Time) bool {
	l := e.load.Load()
	return l == nil || now.Sub(l.ScrapedAt) > e.staleAfter
}

// Healthy reports the last active health check's verdict.
func (e *Endpoint) Healthy() bool { return e.healthy.Load() }

// SetHealthy records a health verdict. Used by the checker and by tests.
func (e *Endpoint) SetHealthy(ok bool) { e.healthy.Store(ok) }

// Draining reports whether the endpoint takes no new requests.
func (e *Endpoint) Draining() bool { return e.draining.Load() }

// SetDraining drains (true) or undrains (false) the endpoint. An endpoint
// that starts to drain is announced to the Registry's OnDrain hooks.
func (e *Endpoint) SetDraining(d bool) {
	if e.draining.Swap(d) || !d || e.reg == nil {
		return
	}
	e.reg.drainStarted(e)
}

// Joined is when the endpoint joined the fleet: for a static pool's
// endpoint, when the registry was built. Zero for an endpoint built
// outside a Registry.
func (e *Endpoint) Joined() time.Time { return e.joined }

// SetJoined sets when the endpoint joined. Used by tests.
func (e *Endpoint) SetJoined(t time.Time) { e.joined = t }

// InFlight is the number of gateway requests currently on this endpoint:
// this gateway's, and those the other gateways on the fleet last reported
// (Peers, with a LoadShare).
func (e *Endpoint) InFlight() int64 { return e.inFlight.Load() + e.Peers().InFlight }

// InFlightTokens is the estimated token cost of the requests in flight,
// the other gateways' reported ones included.
func (e *Endpoint) InFlightTokens() int64 { return e.inFlightTokens.Load() + e.Peers().InFlightTokens }

// OwnInFlight is the number of this gateway's requests on the endpoint.
func (e *Endpoint) OwnInFlight() int64 { return e.inFlight.Load() }

// OwnInFlightTokens is the estimated token cost of this gateway's requests
// in flight there.
func (e *Endpoint) OwnInFlightTokens() int64 { return e.inFlightTokens.Load() }

// BreakerState is the endpoint's circuit breaker state.
func (e *Endpoint) BreakerState() gobreaker.State { return e.breaker.State() }

// WantsTrial reports whether the breaker is half-open and has room for
// another trial request. Routing sends such an endpoint a request even
// when others are closed: a trial's success is the only way a breaker
// closes, and scorers would seldom choose a replica that has just come
// back with an empty cache. At most breakerTrials requests are on trial at
// once, so a replica still broken costs a few fast failures per
// BreakerOpenFor.
func (e *Endpoint) WantsTrial() bool {
	return e.trials.Load() < breakerTrials && e.breaker.State() == gobreaker.StateHalfOpen
}

// Available reports whether new requests may be sent here: healthy, not
// draining, scraped once if it joined a running fleet, breaker not open,
// and, in a lendable pool, lent.
func (e *Endpoint) Available() bool {
	return e.Healthy() && !e.Draining() && !e.joining.Load() && e.breaker.State() != gobreaker.StateOpen && (e.Pool == nil || e.Pool.admitsLent())
}

// Joining reports whether the endpoint joined a running fleet and waits
// for its first good scrape before it takes traffic.
func (e *Endpoint) Joining() bool { return e.joining.Load() }

// Drained is closed once the endpoint has left the fleet, its in-flight
// requests have finished and the OnLeave hooks have run; nil for an
// endpoint built outside a Registry.
func (e *Endpoint) Drained() <-chan struct{} { return e.drained }

// Labels are what discovery says of the endpoint.
func (e *Endpoint) Labels() Labels {
	if l := e.labels.Load(); l != nil {
		return *l
	}
	return Labels{}
}

// Revision is the endpoint's revision: its label's ("" when unknown).
func (e *Endpoint) Revision() string { return e.Labels().Revision }

// Role is the endpoint's role: its label's, else its pool's.
func (e *Endpoint) Role() string {
	if r := e.Labels().Role; r != "" {
		return r
	}
	if e.Pool == nil {
		return RoleBoth
	}
	return e.Pool.Config.Role
}

// Serves reports whether the endpoint serves the named model: its
// label's models, else its pool's, or a LoRA adapter of them
// (IsAdapter).
func (e *Endpoint) Serves(model string) bool {
	return slices.Contains(e.models(), model) || e.IsAdapter(model)
}

func (e *Endpoint) models() []string {
	if m := e.Labels().Models; m != nil {
		return m
	}
	if e.Pool == nil {
		return nil
	}
	return e.Pool.Config.ServedModels
}

// Pool is a set of endpoints serving the same models with the same role.
type Pool struct {
	Config PoolConfig
	// Model is the pool's model profile; zero if the config names none.
	Model accelerators.Model
	// Accelerator is the pool's accelerator profile; zero if none.
	Accelerator accelerators.Accelerator

	// eps is the pool's current endpoint set (Registry.publishLocked).
	eps atomic.Pointer[[]*Endpoint]

	// lend is the lease of a lendable pool (see lend.go).
	lend lending
}

// Serves reports whether the pool serves the named model, or names it
// as an adapter (PoolConfig.Adapters).
func (p *Pool) Serves(model string) bool {
	return slices.Contains(p.Config.ServedModels, model) || p.adapter(model)
}

// Endpoints is the pool's current endpoint set, by index. The slice is a
// snapshot: do not modify it.
func (p *Pool) Endpoints() []*Endpoint {
	if eps := p.eps.Load(); eps != nil {
		return *eps
	}
	return nil
}

// Name is the pool's configured name.
func (p *Pool) Name() string { return p.Config.Name }
