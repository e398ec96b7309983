package affinity

import (
	"sync/atomic"

	"github.com/sony/gobreaker/v2"
	"github.com/turnpike-gateway/turnpike/pools"
)

// filterFactories build the filters by config name.
var filterFactories = map[string]func(*env) Filter{
	FilterHealthy:       func(*env) Filter { return Healthy{} },
	FilterBreakerClosed: func(*env) Filter { return BreakerClosed{} },
	FilterServesModel:   func(*env) Filter { return ServesModel{} },
	FilterHasRoom:       func(e *env) Filter { return HasRoom{MaxQueue: e.cfg.MaxQueue} },
	FilterEngineRoom:    func(e *env) Filter { return EngineRoom{MaxQueue: e.cfg.MaxEngineQueue} },
	FilterLoRAAffinity:  func(e *env) Filter { return LoRAAffinity{MaxQueue: e.cfg.MaxQueue} },
	FilterInteractiveLane: func(e *env) Filter {
		return InteractiveLane{Endpoints: max(e.cfg.InteractiveLane, 0), MinFleet: DefaultInteractiveLaneMinFleet,
			Hold: e.cfg.InteractiveLaneHold, Now: e.now, lastInteractive: new(atomic.Int64)}
	},
}

// keep compacts the candidates for which ok holds to the front.
func keep(candidates []*pools.Endpoint, ok func(*pools.Endpoint) bool) []*pools.Endpoint {
	n := 0
	for _, ep := range candidates {
		if ok(ep) {
			candidates[n] = ep
			n++
		}
	}
	return candidates[:n]
}

// Healthy keeps the endpoints that take new requests: healthy, not
// draining, breaker not open.
type Healthy struct{}

// Name implements Plugin.
func (Healthy) Name() string { return FilterHealthy }

// Filter implements Filter.
func (Healthy) Filter(_ *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint {
	return keep(candidates, (*pools.Endpoint).Available)
}

// BreakerClosed keeps the endpoints whose breaker is closed, with one
// exception: a half-open endpoint with room for a trial request
// (pools.Endpoint.WantsTrial) takes the request alone, even while others
// are closed. A trial's success is the only way a breaker closes, and the
// scorers would seldom choose a replica that has just come back with an
// empty cache, so without it a recovered replica would stay half-open for
// good. Trials are few: the breaker lets one through at a time and closes
// on its success. When no breaker is closed and none wants a trial, it
// keeps the half-open ones.
type BreakerClosed struct{}

// Name implements Plugin.
func (BreakerClosed) Name() string { return FilterBreakerClosed }

// Filter implements Filter. When every breaker is closed, the common
// case, it reads each breaker once.
func (BreakerClosed) Filter(_ *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint {
	closed, trial := 0, false
	for _, ep := range candidates {
		switch ep.BreakerState() {
		case gobreaker.StateClosed:
			closed++
		case gobreaker.StateHalfOpen:
			trial = trial || ep.WantsTrial()
		}
	}
	if closed == len(candidates) {
		return candidates
	}
	// keep writes only what passes, so when nothing passes (a breaker
	// moved since the count) the candidates are intact for the next pass.
	if trial {
		if kept := keep(candidates, (*pools.Endpoint).WantsTrial); len(kept) > 0 {
			return kept
		}
	}
	if kept := keep(candidates, breakerClosed); len(kept) > 0 {
		return kept
	}
	return keep(candidates, breakerNotOpen)
}

func breakerClosed(ep *pools.Endpoint) bool  { return ep.BreakerState() == gobreaker.StateClosed }
func breakerNotOpen(ep *pools.Endpoint) bool { return ep.BreakerState() != gobreaker.StateOpen }

// ServesModel keeps the endpoints of pools that serve the request's model
// with a role that takes a whole request. The gateway's candidates are
// already so chosen; the filter states the rule where routing can see it,
// and is where prefill/decode roles will be told apart.
type ServesModel struct{}

// Name implements Plugin.
func (ServesModel) Name() string { return FilterServesModel }

// Filter implements Filter.
func (ServesModel) Filter(c *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint {
	model := c.Request.Model
	n := 0
	for _, ep := range candidates {
		if servesRole(ep, model, c.Request.Prefill) {
			candidates[n] = ep
			n++
		}
	}
	return candidates[:n]
}

// servesRole: ep serves model and the leg (a prefill leg on prefill
// pools; a whole request or a decode leg on both and decode pools).
func servesRole(ep *pools.Endpoint, model string, prefill bool) bool {
	if ep.Pool == nil {
		return true // an endpoint outside any pool: nothing to check against
	}
	if r := ep.Role(); prefill != (r == pools.RolePrefill) {
		return false
	}
	return model == "" || ep.Serves(model)
}

// HasRoom drops the endpoints whose queue (engine waiting + gateway in
// flight) has reached MaxQueue, as long as some candidate has room; when
// none has, it keeps them all and leaves the choice to the scorers.
type HasRoom struct {
	// MaxQueue is the queue bound, in requests; zero means DefaultMaxQueue.
	MaxQueue int
}

// Name implements Plugin.
func (HasRoom) Name() string { return FilterHasRoom }

// Filter implements Filter.
func (h HasRoom) Filter(c *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint {
	limit := float64(h.MaxQueue)
	if h.MaxQueue <= 0 {
		limit = DefaultMaxQueue
	}
	roomy := 0
	for _, ep := range candidates {
		if queueDepth(ep, c.Now) < limit {
			roomy++
		}
	}
	if roomy == 0 || roomy == len(candidates) {
		return candidates
	}
	n := 0
	for _, ep := range candidates {
		if queueDepth(ep, c.Now) < limit {
			candidates[n] = ep
			n++
		}
	}
	return candidates[:n]
}

// EngineRoom drops the endpoints whose engine queues MaxQueue requests or
// more (pools.Endpoint.EngineQueue: the waiting it reported plus what this
// gateway sent since), as long as some candidate queues fewer; when none
// does, it keeps them all. It binds a turn late: flow control dispatches a
// turn when some endpoint has room, and this sends it there rather than
// into another engine's queue, so that a backlog waits in the gateway's one
// fair queue, served by whichever engine frees first, instead of in one
// engine's queue while another idles. An endpoint that holds at least
// half of the prompt's blocks passes whatever its queue: there the turn's
// prefill is a fraction of a recompute elsewhere, and the cost scorer
// weighs that queue against it (an agent session's next turn stays with
// its context). A Background turn passes only where the engine queues
// nothing, its context there or not.
type EngineRoom struct {
	// MaxQueue is the engine queue bound, in requests; zero means
	// DefaultMaxEngineQueue.
	MaxQueue int
}

// Name implements Plugin.
func (EngineRoom) Name() string { return FilterEngineRoom }

// Filter implements Filter.
func (f EngineRoom) Filter(c *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint {
	limit := int64(f.MaxQueue)
	if limit <= 0 {
		limit = DefaultMaxEngineQueue
	}
	ok := func(ep *pools.Endpoint) bool {
		return ep.EngineQueue(c.Now) < limit || (c.PromptBlocks > 0 && 2*c.match(ep).Blocks >= c.PromptBlocks)
	}
	if c.Request.Band == BandBackground {
		// Flow control grants a Background turn only an engine that
		// queues nothing (turns.Measurement.Slack); it goes there, not
		// into a queue ahead of the turns of the bands above it.
		ok = func(ep *pools.Endpoint) bool { return ep.EngineQueue(c.Now) == 0 }
	}
	roomy := 0
	for _, ep := range candidates {
		if ok(ep) {
			roomy++
		}
	}
	if roomy == 0 || roomy == len(candidates) {
		return candidates
	}
	return keep(candidates, ok)
}

var (
	_ Filter = EngineRoom{}
	_ Filter = Healthy{}
	_ Filter = BreakerClosed{}
	_ Filter = ServesModel{}
	_ Filter = HasRoom{}
)
