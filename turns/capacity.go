package turns

import (
	"math"
	"sync/atomic"
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
	// Open is the number of available endpoints that are not saturated:
	// while there is one, queued turns are dispatched.
	Open int
	// Room is how many more tokens the open endpoints take, summed, before
	// each is saturated by its in-flight tokens; one dispatch pass grants
	// turns up to it, so a burst granted between two measurements cannot
	// overrun the fleet. Negative means unbounded.
	Room int64
	// QueueRoom is how many more requests the open endpoints' engines
	// queue, summed, before each is saturated by its queue depth; and
	// InFlight is the gateway's requests in flight to the available
	// endpoints. A dispatch pass grants up to QueueRoom less the turns
	// granted and not yet sent (tickets outstanding beyond InFlight), so
	// that turns dispatched together do not all land in one engine's
	// queue. Negative QueueRoom means unbounded.
	QueueRoom int
	InFlight  int64
	// Slots is how many turns the pool may have dispatched at once.
	Slots int
	// Reserved is how many of Slots only Interactive turns may take, and
	// how many Interactive turns may run while the pool is held; below
	// Slots.
	Reserved int
	// Lower is the pool's room for the bands below Interactive (Standard
	// and Background): the fields above measure each endpoint against its
	// whole capacity, which is the Interactive band's room; Lower measures
	// it against its capacity less what it keeps free for Interactive
	// turns (FlowControl.InteractiveReservedPerEndpoint sequences,
	// InteractiveReservedTokensPerEndpoint tokens, and an engine queue
	// below LowerBandQueueDepth). Lower.Open ≤ Open.
	Lower BandRoom
	// Slack is how many of the endpoints open to the lower bands have an
	// engine that queues nothing (pools.Endpoint.EngineQueue is zero):
	// the only room Background turns take, so that they start at once
	// and never wait in an engine's first-come-first-served queue ahead
	// of the Standard and Interactive turns that come after them.
	// Slack ≤ Lower.Open.
	Slack int
	// LentSlack is Slack's count over the endpoints of lent pools
	// (pools.PoolConfig.Lendable), which take Background turns only: the
	// fields above leave those endpoints out, so that admission of the
	// other bands never counts room they cannot use. LentSlots and
	// LentInFlight are Slots and InFlight over the lent endpoints: a turn
	// granted on their room is sent only to them (Ticket.OnLent) and
	// counts against them alone.
	LentSlack    int
	LentSlots    int
	LentInFlight int64
	// Seqs is the sequences the available endpoints' engines run at once,
	// summed: each engine's max_num_seqs, or its slots when it does not
	// report one. With the pool's measured hold time it is the pool's
	// pace, which bounds its queues (FlowControl.FleetQueueBound).
	Seqs int
	// Backlog is the best available endpoint's engine queue, in sequences'
	// holds: a turn sent now to that engine starts after about Backlog ×
	// the pool's hold time (its turns' time from dispatch to release), as
	// the requests ahead of it past the engine's free sequences each wait
	// for one of its sequences to end. 0 while some engine has a sequence
	// free for it. A turn about to wait its band's TTL in the gateway is
	// sent to an engine while that wait is within the TTL, and shed at
	// once when it is not.
	Backlog float64
	// Prioritized reports that every available endpoint's engine
	// schedules by each request's priority (pools.PoolConfig.
	// PriorityScheduling): Interactive turns go to it whenever the pool
	// has a slot, held or not, since the engine takes them ahead of the
	// lower bands it queues.
	Prioritized bool
}

// measured fills Lower and Slack, when a Capacity left Lower zero (one
// that does not tell the bands apart), with the pool's own room: a
// measured Lower is never zero, since an endpoint with no room for the
// lower bands counts as saturated for them.
func (m *Measurement) measured() *Measurement {
	if m.Lower == (BandRoom{}) {
		m.Lower = BandRoom{Saturation: m.Saturation, Open: m.Open, Room: m.Room, QueueRoom: m.QueueRoom}
		m.Slack = m.Open
	}
	return m
}

// BandRoom is a pool's room for one class of bands.
type BandRoom struct {
	// Saturation is the mean over available endpoints of their saturation
	// for the class, 0..1; the shed curve reads it.
	Saturation float64
	// Open is the number of available endpoints with room for the class.
	Open int
	// Room and QueueRoom are as Measurement's, against the class's
	// capacity. Negative means unbounded.
	Room      int64
	QueueRoom int
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
// scraped load and calibrated capacity and the gateway's requests and
// tokens in flight (see SaturationConfig). Each available endpoint gets
// MaxInFlightPerEndpoint slots, or fewer when its engine runs fewer
// sequences (max_num_seqs plus QueueDepthPerEndpoint), of which
// InteractiveReservedPerEndpoint are reserved for the Interactive band.
func (pc PoolCapacity) Measure(now time.Time, cfg *FlowControl) Measurement {
	return measure(pc.Pool.Endpoints(), now, cfg, 0, true)
}

// ModelCapacity is the Capacity of every endpoint that serves a model
// whole, across pools: the endpoints the router chooses among, so that
// admission and routing agree on the fleet a turn may use. Build one per
// model at start-up; it reads the registry's current endpoints at each
// Measure, so that it follows discovery.
type ModelCapacity struct {
	name  string
	reg   *pools.Registry
	model string
	lane  Lane
	// lastInteractive is when an Interactive turn last came, in Unix
	// nanoseconds; 0 never.
	lastInteractive atomic.Int64
}

// Lane is the routing policy's interactive lane as flow control must see
// it (affinity's interactive-lane filter, with the same settings): while
// an Interactive turn came within Hold, the Endpoints available endpoints
// with the lowest indexes take only Interactive turns, so they are no
// room for the lower bands; a fleet of fewer than MinFleet available
// endpoints has no lane. Without it, admission would count the lane's free
// room for Standard and Background turns that routing then sends to the
// other engines' queues. The zero Lane is none.
type Lane struct {
	Endpoints int
	MinFleet  int
	Hold      time.Duration
}

// NewModelCapacity collects reg's endpoints serving model, with lane as
// the routing policy's interactive lane.
func NewModelCapacity(reg *pools.Registry, model string, lane Lane) *ModelCapacity {
	return &ModelCapacity{name: "model:" + model, reg: reg, model: model, lane: lane}
}

// Name is "model:" and the model's name.
func (mc *ModelCapacity) Name() string { return mc.name }

// Measure is PoolCapacity.Measure over every endpoint serving the model,
// the interactive lane's endpoints left out of the lower bands' room while
// the lane is held.
func (mc *ModelCapacity) Measure(now time.Time, cfg *FlowControl) Measurement {
	eps := mc.reg.Serving(mc.model)
	return measure(eps, now, cfg, mc.laneNow(now, eps), mc.reserveNow(now, cfg))
}

// noteInteractive implements interactiveNoter.
func (mc *ModelCapacity) noteInteractive(now time.Time) {
	mc.lastInteractive.Store(now.UnixNano())
}

// reserveNow reports whether the endpoints keep their reserves for
// Interactive turns now: one came within InteractiveReserveHold, or the
// hold is negative (always).
func (mc *ModelCapacity) reserveNow(now time.Time, cfg *FlowControl) bool {
	if cfg.InteractiveReserveHold < 0 {
		return true
	}
	last := mc.lastInteractive.Load()
	return last != 0 && now.UnixNano()-last <= int64(cfg.InteractiveReserveHold)
}

// laneNow is how many of the first available endpoints of eps form the
// lane now.
func (mc *ModelCapacity) laneNow(now time.Time, eps []*pools.Endpoint) int {
	l := mc.lane
	last := mc.lastInteractive.Load()
	if l.Endpoints <= 0 || last == 0 || now.UnixNano()-last > int64(l.Hold) {
		return 0
	}
	// Count available endpoints only as far as the answer needs: enough
	// for the fleet to have a lane, and one beyond the lane.
	enough := max(l.MinFleet, l.Endpoints+1)
	n := 0
	for _, e := range eps {
		if n >= enough {
			break
		}
		if e.Available() && !e.BackgroundOnly() {
			n++
		}
	}
	if n < l.MinFleet {
		return 0
	}
	return min(l.Endpoints, n-1)
}

// interactiveNoter is a Capacity that wants to know when Interactive turns
// come (ModelCapacity, for its lane).
type interactiveNoter interface {
	noteInteractive(now time.Time)
}

// endpointLoad is the part of *pools.Endpoint that measure reads.
type endpointLoad interface {
	Available() bool
	Stale(now time.Time) bool
	Load() pools.Load
	InFlight() int64
	InFlightTokens() int64
	EngineQueue(now time.Time) int64
	Waiting(now time.Time) int64
	// BackgroundOnly reports whether the endpoint's pool takes only
	// Background turns (a lendable pool; available only while lent).
	BackgroundOnly() bool
	// Prioritizes reports whether its engine schedules by priority.
	Prioritizes() bool
}

// endpointCapacity is one endpoint's calibrated capacity and how much of
// it is taken.
type endpointCapacity struct {
	saturation float64 // 0..1
	slots      int     // requests it may have dispatched at once
	room       int64   // in-flight tokens before it saturates, ≥ 0
	queueRoom  int     // engine queue before it saturates, ≥ 0
	slack      bool    // its engine queues nothing (EngineQueue is 0)
	seqs       int     // sequences its engine runs at once
	// backlog is how long a turn sent to it now waits for a sequence, in
	// holds of one sequence: the requests ahead of it past the engine's
	// free sequences, and itself, over the engine's sequences; 0 when a
	// sequence is free for it.
	backlog float64
	// lower is the same for the bands below Interactive, against the
	// capacity left after the Interactive reserve; lower.saturation ≥
	// saturation.
	lower struct {
		saturation float64
		room       int64
		queueRoom  int
	}
}

// measure is PoolCapacity.Measure over any endpoint type; generic so that
// the loop over []*pools.Endpoint makes direct calls and tests can use
// fakes.
//
// The first lane available endpoints are the interactive lane: no room
// for the lower bands.
//
// Without reserve, the lower bands' room is the whole room: no endpoint
// keeps any for Interactive turns.
func measure[E endpointLoad](eps []E, now time.Time, cfg *FlowControl, lane int, reserve bool) Measurement {
	m := Measurement{Prioritized: true, Backlog: math.Inf(1)}
	var sum, lowerSum float64
	slotsKept := 0
	if reserve {
		slotsKept = cfg.interactiveReserve()
	}
	for _, e := range eps {
		if !e.Available() {
			continue
		}
		if e.BackgroundOnly() {
			// No reserve for Interactive turns on a lent pool: they
			// never go there.
			ec := endpointCapacityOf(e, now, cfg, false)
			if ec.slack && ec.lower.saturation < 1 {
				m.LentSlack++
			}
			m.LentInFlight += e.InFlight()
			m.LentSlots += ec.slots
			continue
		}
		m.Endpoints++
		m.Prioritized = m.Prioritized && e.Prioritizes()
		ec := endpointCapacityOf(e, now, cfg, reserve)
		if m.Endpoints <= lane {
			ec.lower.saturation = 1
		}
		sum += ec.saturation
		lowerSum += ec.lower.saturation
		if ec.saturation < 1 {
			m.Open++
			m.Room += ec.room
			m.QueueRoom += max(ec.queueRoom, 1)
		}
		if ec.lower.saturation < 1 {
			m.Lower.Open++
			m.Lower.Room += ec.lower.room
			m.Lower.QueueRoom += max(ec.lower.queueRoom, 1)
			if ec.slack {
				m.Slack++
			}
		}
		m.InFlight += e.InFlight()
		m.Slots += ec.slots
		m.Reserved += min(slotsKept, ec.slots-1)
		m.Seqs += ec.seqs
		m.Backlog = min(m.Backlog, ec.backlog)
	}
	if m.Endpoints == 0 {
		m.Saturation, m.Lower.Saturation, m.Prioritized, m.Backlog = 1, 1, false, 0
		return m
	}
	m.Saturation = sum / float64(m.Endpoints)
	m.Lower.Saturation = lowerSum / float64(m.Endpoints)
	return m
}

// endpointSaturation is the endpoint's saturation alone.
func endpointSaturation[E endpointLoad](e E, now time.Time, cfg *FlowControl) float64 {
	return endpointCapacityOf(e, now, cfg, true).saturation
}

// endpointCapacityOf is the largest of the endpoint's ratios to its
// capacity (see SaturationConfig), capped at 1; stale metrics are
// saturated, because an engine that stopped answering scrapes is most
// likely overloaded.
func endpointCapacityOf[E endpointLoad](e E, now time.Time, cfg *FlowControl, reserve bool) endpointCapacity {
	sc := &cfg.Saturation
	l := e.Load()
	ec := endpointCapacity{slots: cfg.MaxInFlightPerEndpoint}
	ec.seqs = ec.slots
	if l.MaxNumSeqs > 0 {
		ec.slots = min(ec.slots, l.MaxNumSeqs+sc.QueueDepthPerEndpoint)
		ec.seqs = l.MaxNumSeqs
	}
	if e.Stale(now) {
		// No word from the engine: what the gateway has sent it is all
		// that is known of its queue.
		ec.saturation, ec.lower.saturation = 1, 1
		ec.backlog = float64(e.InFlight()+1) / float64(ec.seqs)
		return ec
	}
	tokens := sc.InFlightTokensPerEndpoint
	if kv := l.KVTokens(); kv > 0 && sc.InFlightTokensPerKVToken > 0 {
		tokens = int64(float64(kv) * sc.InFlightTokensPerKVToken)
	}
	inFlight := max(e.InFlight(), int64(l.Running+l.Waiting))
	inFlightTokens := e.InFlightTokens()
	queued := e.EngineQueue(now)
	waiting := queued
	free := int64(0)
	if f := int64(l.MaxNumSeqs - l.Running); l.MaxNumSeqs > 0 && f > 0 && l.KVUsage < sc.KVUtilization {
		// An engine with sequences free and KV room admits what waits
		// behind its step's prefill token budget (chunked prefill) within
		// a step or two: only what is past its free sequences saturates
		// it. The lower bands still see all of it (below): an Interactive
		// turn sent there prefills behind every request waiting.
		free = f
		waiting = max(queued-free, 0)
	}
	if queued >= free {
		ec.backlog = float64(waiting+1) / float64(ec.seqs)
	}
	s := max(
		float64(waiting)/float64(sc.QueueDepthPerEndpoint),
		float64(inFlight)/float64(ec.slots),
		float64(inFlightTokens)/float64(tokens),
	)
	if waiting > 0 {
		s = max(s, l.KVUsage/sc.KVUtilization)
	}
	ec.saturation = min(s, 1)
	ec.room = max(tokens-inFlightTokens, 0)
	ec.queueRoom = max(sc.QueueDepthPerEndpoint-int(waiting), 0)
	ec.slack = queued == 0

	// The lower bands' capacity is what is left after the room kept for
	// Interactive turns: fewer sequences, fewer tokens, and a shorter
	// engine queue, since an Interactive turn sent to this engine waits
	// behind whatever is queued there, first come first served. That
	// queue is the engine's own count, less the requests that began to
	// answer since (pools.Endpoint.Waiting): the requests sent since its last
	// scrape are bounded by the whole queue depth above already, and on a
	// busy gateway many of them are still being read or written there, not
	// queued in the engine, so counting them again would hold lower-band
	// turns while the engines have room.
	lowSlots := max(ec.slots-min(cfg.interactiveReserve(), ec.slots-1), 1)
	lowTokens := max(tokens-min(cfg.interactiveReservedTokens(), tokens/2), 1)
	lowQueue := cfg.lowerBandQueueDepth()
	if !reserve {
		lowSlots, lowTokens, lowQueue = ec.slots, tokens, sc.QueueDepthPerEndpoint
	}
	ls := max(
		s,
		float64(e.Waiting(now))/float64(lowQueue),
		float64(inFlight)/float64(lowSlots),
		float64(inFlightTokens)/float64(lowTokens),
	)
	ec.lower.saturation = min(ls, 1)
	ec.lower.room = max(lowTokens-inFlightTokens, 0)
	// A pass grants lower-band turns up to the whole queue room of the
	// endpoints open to them: the engine's own count above decides which
	// are open, and a pass bounded tighter would hold turns at the gateway
	// while a slow host sends those already granted.
	ec.lower.queueRoom = ec.queueRoom
	return ec
}
