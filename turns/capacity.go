package turns

import (
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

// Capacity is flow control's view of the pool a turn will be sent to. The
// gateway passes one to Acquire; PoolCapacity is the one over a
// *pools.Pool, and tests pass their own.
type Capacity interface {
	// Name identifies the pool: turns to the same name share queues, and
	// the saturation metric is labelled with it.
	Name() string
	// Measure reports the pool's state now under the given thresholds. It
	// is called on every Acquire and Release, so it must be cheap and must
	// not allocate.
	Measure(now time.Time, cfg *FlowControl) Measurement
}

// Measurement is a pool's state at one instant.
type Measurement struct {
	// Saturation is 0 (idle) .. 1 (every available endpoint saturated).
	Saturation float64
	// Endpoints is the number of available endpoints.
	Endpoints int
	// Slots is how many turns the pool may have dispatched at once.
	Slots int
	// Reserved is how many of Slots only Interactive turns may take, and
	// how many Interactive turns may run while the pool is held; below
	// Slots.
	Reserved int
}

var (
	_ Capacity = PoolCapacity{}
	_ Capacity = (*ModelCapacity)(nil)
)

// PoolCapacity is the Capacity of a *pools.Pool, read through the pool's
// lock-free load view. It is a single pointer, so storing it in a Capacity
// does not allocate.
type PoolCapacity struct {
	Pool *pools.Pool
}

// Name is the pool's configured name.
func (pc PoolCapacity) Name() string { return pc.Pool.Name() }

// Measure computes the pool's saturation from each available endpoint's
// scraped load and the gateway's in-flight tokens (see SaturationConfig),
// and gives each available endpoint MaxInFlightPerEndpoint slots, of which
// InteractiveReservedPerEndpoint are reserved for the Interactive band.
func (pc PoolCapacity) Measure(now time.Time, cfg *FlowControl) Measurement {
	return measure(pc.Pool.Endpoints, now, cfg)
}

// ModelCapacity is the Capacity of every endpoint that serves a model
// whole, across pools: the endpoints the router chooses among, so that
// admission and routing agree on the fleet a turn may use. Build one per
// model at start-up; it is immutable.
type ModelCapacity struct {
	name string
	eps  []*pools.Endpoint
}

// NewModelCapacity collects reg's endpoints serving model.
func NewModelCapacity(reg *pools.Registry, model string) *ModelCapacity {
	return &ModelCapacity{name: "model:" + model, eps: reg.EndpointsFor(nil, model)}
}

// Name is "model:" and the model's name.
func (mc *ModelCapacity) Name() string { return mc.name }

// Measure is PoolCapacity.Measure over every endpoint serving the model.
func (mc *ModelCapacity) Measure(now time.Time, cfg *FlowControl) Measurement {
	return measure(mc.eps, now, cfg)
}

// endpointLoad is the part of *pools.Endpoint that measure reads.
type endpointLoad interface {
	Available() bool
	Stale(now time.Time) bool
	Load() pools.Load
	InFlightTokens() int64
}

// measure is PoolCapacity.Measure over any endpoint type; generic so that
// the loop over []*pools.Endpoint makes direct calls and tests can use
// fakes.
func measure[E endpointLoad](eps []E, now time.Time, cfg *FlowControl) Measurement {
	var m Measurement
	var sum float64
	for _, e := range eps {
		if !e.Available() {
			continue
		}
		m.Endpoints++
		sum += endpointSaturation(e, now, &cfg.Saturation)
	}
	if m.Endpoints == 0 {
		m.Saturation = 1
		return m
	}
	m.Saturation = sum / float64(m.Endpoints)
	m.Slots = m.Endpoints * cfg.MaxInFlightPerEndpoint
	m.Reserved = m.Endpoints * cfg.interactiveReserve()
	return m
}

// endpointSaturation is the largest of the endpoint's ratios to the
// thresholds, capped at 1; stale metrics are saturated, because an engine
// that stopped answering scrapes is most likely overloaded.
func endpointSaturation[E endpointLoad](e E, now time.Time, sc *SaturationConfig) float64 {
	if e.Stale(now) {
		return 1
	}
	l := e.Load()
	s := max(
		float64(l.Waiting)/float64(sc.QueueDepthPerEndpoint),
		l.KVUsage/sc.KVUtilization,
		float64(e.InFlightTokens())/float64(sc.InFlightTokensPerEndpoint),
	)
	return min(s, 1)
}

var _ Capacity = PoolCapacity{}
