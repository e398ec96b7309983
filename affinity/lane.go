package affinity

import (
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

// InteractiveLane reserves endpoints for the interactive band while
// interactive turns keep arriving: priority classes with reserved capacity.
//
// Flow control can hold a burst of agent turns at the gateway, but once a
// turn is in an engine it shares every continuous-batching step with the
// rest of the batch: an interactive prefill waits for a step that also
// carries another tenant's multi-thousand-token prefill chunks. The only
// engine time turnpike can promise an interactive turn is engine time
// nobody else holds. So while an interactive turn was seen within Hold,
// interactive turns go only to the lane — the Endpoints available
// candidates with the lowest endpoint index — and every other turn only
// elsewhere. When no interactive turn has come for Hold, the lane serves
// everyone again. Fleets smaller than MinFleet get no lane: reserving one
// of two or three replicas costs the other bands too much.
type InteractiveLane struct {
	// Endpoints is the lane's size; zero disables the filter.
	Endpoints int
	// MinFleet is the smallest candidate set that gets a lane.
	MinFleet int
	// Hold keeps the lane reserved this long after an interactive turn.
	Hold time.Duration
	// Now is the clock.
	Now func() time.Time

	// lastInteractive is when an interactive turn was last routed, in Unix
	// nanoseconds; shared by every copy of the filter.
	lastInteractive *atomic.Int64
}

// Name implements Plugin.
func (InteractiveLane) Name() string { return FilterInteractiveLane }

// Filter implements Filter.
func (l InteractiveLane) Filter(c *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint {
	lane := min(l.Endpoints, len(candidates)-1)
	if lane <= 0 || len(candidates) < l.MinFleet {
		return candidates
	}
	// The lane is the lane smallest indexes among the candidates: the
	// bound below which an endpoint belongs to it.
	bound := laneBound(candidates, lane)
	now := l.Now()
	if c.Request.Interactive {
		l.lastInteractive.Store(now.UnixNano())
		return keep(candidates, func(ep *pools.Endpoint) bool { return ep.Index <= bound })
	}
	if now.UnixNano()-l.lastInteractive.Load() > int64(l.Hold) {
		return candidates
	}
	return keep(candidates, func(ep *pools.Endpoint) bool { return ep.Index > bound })
}

// laneBound is the n-th smallest endpoint index among candidates (n ≥ 1,
// n < len(candidates)), found without allocating.
func laneBound(candidates []*pools.Endpoint, n int) int {
	bound := -1
	for range n {
		next := int(^uint(0) >> 1)
		for _, ep := range candidates {
			if ep.Index > bound && ep.Index < next {
				next = ep.Index
			}
		}
		bound = next
	}
	return bound
}

var _ Filter = InteractiveLane{}
