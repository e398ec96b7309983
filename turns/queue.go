package turns

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/internal/heap"
)

// The queues of one pool. Everything here is guarded by Controller.mu.
//
// A pool has one bandQueue per band. A band is a two-level fair queue, both
// levels start-time fair queuing on virtual time measured in tokens:
//
//   - across tenants: each backlogged tenantFlow carries a virtual start
//     time; the band serves the smallest, then advances it by
//     cost / weight. A tenant that goes idle and returns starts at the
//     band's current virtual time, so idleness banks no credit. Under
//     backlog, tenants' dispatched tokens converge to their weights.
//   - across sessions of a tenant: the same with equal weights, except that
//     a session's key is its virtual time less PriorityCredit times its best
//     turn's priority (Score without its age term, minus the age credit
//     earned by arriving earlier). A higher score buys a bounded head start;
//     it cannot starve another session, whose virtual time stays behind.
//
// Within a session, turns go highest priority first, arrival order on ties.
// Each band also keeps its turns in arrival order for TTL expiry.

// waiterState is where a waiter is in its life.
type waiterState uint8

const (
	stateFree       waiterState = iota // in the free pool, or being admitted
	stateQueued                        // in a bandQueue
	stateDispatched                    // granted; held by a Ticket
	stateDone                          // shed while queued; Acquire returns the error
)

// waiter is one Acquire call. Acquire owns it until it is queued; while
// queued the pool's queue holds it under Controller.mu; the dispatcher hands
// it back by a send on ready; after a grant the Ticket owns it until Release
// returns it to the free pool.
type waiter struct {
	turn     Turn
	band     Band
	cost     int64
	priority float64 // age-free score less age credit; higher goes first
	seq      uint64  // arrival order, breaks ties
	queuedAt time.Time

	ctl    *Controller
	cap    Capacity
	pool   *poolQueue
	tenant *tenantState

	session    *sessionFlow // while queued
	heapIdx    int          // in session.turns
	prev, next *waiter      // band arrival list, while queued

	state       waiterState
	gen         uint64 // bumped on every return to the free pool
	err         *ShedError
	grantedAt   time.Time
	onLent      bool // granted on lent pools' room: see Ticket.OnLent
	dispatchSeq uint64
	ready       chan struct{} // buffered 1: one send per use
}

// sessionFlow is a session's backlog within a tenant's band.
type sessionFlow struct {
	key     string
	vtime   float64
	sortKey float64 // vtime − PriorityCredit·head priority; smaller first
	heapIdx int     // in tenantFlow.sessions, −1 when not backlogged
	// turns go highest priority first (the key is its negation), then
	// in arrival order.
	turns heap.Heap[float64, *waiter]
}

// tenantFlow is a tenant's backlog in one band of one pool. It outlives its
// backlog (tenants are few) so that a tenant that is ahead stays ahead.
type tenantFlow struct {
	state    *tenantState
	vtime    float64
	order    uint64 // creation order, breaks ties
	heapIdx  int    // in bandQueue.tenants, −1 when not backlogged
	svtime   float64
	sessions heap.Heap[float64, *sessionFlow] // by sortKey, then head turn's seq
	byKey    map[string]*sessionFlow
}

// bandQueue is one band of one pool.
type bandQueue struct {
	band    Band
	flows   map[*tenantState]*tenantFlow
	tenants heap.Heap[float64, *tenantFlow] // by vtime, then order
	vtime   float64                         // the band's virtual time: start of the last served tenant
	count   int
	tokens  int64
	// credit is the band's guaranteed share earned while more urgent bands
	// were served (see BandConfig.MinShare); positive means it is owed.
	credit     float64
	head, tail *waiter
}

// poolQueue is the queues and dispatch state of one pool.
type poolQueue struct {
	name       string
	cap        Capacity // the latest one Acquire was given
	bands      [numBands]bandQueue
	queued     int
	dispatched int // tickets outstanding, but those granted on lent room
	// lentDispatched is the tickets outstanding that were granted on the
	// room of lent pools' engines (Ticket.OnLent), which count against
	// those engines alone.
	lentDispatched int
	// interactive is how many of the tickets outstanding are Interactive:
	// those may use the reserve while the pool is held.
	interactive int
	// dispatchedTokens is the cost of the tickets outstanding; hold is
	// how long a ticket is held, dispatch to release, smoothed (seconds;
	// 0 before the first release): the autoscaling signals' inputs.
	dispatchedTokens int64
	hold             float64
	dispatchSeq      uint64
	flowOrder        uint64
	free             []*sessionFlow
	saturation       prometheus.Gauge
	lowerSaturation  prometheus.Gauge
	inFlight         prometheus.Gauge
}

func newPoolQueue(name string) *poolQueue {
	pq := &poolQueue{name: name}
	for i := range pq.bands {
		pq.bands[i].band = Bands[i]
		pq.bands[i].flows = make(map[*tenantState]*tenantFlow)
		pq.bands[i].tenants = heap.NewIndexed[float64](func(tf *tenantFlow, i int) { tf.heapIdx = i })
	}
	return pq
}

// push queues w in its band.
func (pq *poolQueue) push(w *waiter, credit float64) {
	bq := &pq.bands[w.band.index()]
	tf := bq.flows[w.tenant]
	if tf == nil {
		pq.flowOrder++
		tf = &tenantFlow{state: w.tenant, order: pq.flowOrder, heapIdx: -1, byKey: make(map[string]*sessionFlow),
			sessions: heap.NewIndexed[float64](func(sf *sessionFlow, i int) { sf.heapIdx = i })}
		bq.flows[w.tenant] = tf
	}
	sf := tf.byKey[w.turn.SessionKey]
	if sf == nil {
		sf = pq.newSession(w.turn.SessionKey, tf.svtime)
		if sf.key != "" {
			tf.byKey[sf.key] = sf
		}
	}
	w.session = sf
	sf.turns.Push(w, -w.priority, w.seq)
	switch {
	case sf.heapIdx < 0:
		sf.rekey(credit)
		tf.sessions.Push(sf, sf.sortKey, sf.turns.At(0).seq)
	case sf.turns.At(0) == w:
		sf.rekey(credit)
		tf.sessions.Fix(sf.heapIdx, sf.sortKey, sf.turns.At(0).seq)
	}
	if tf.heapIdx < 0 {
		tf.vtime = max(tf.vtime, bq.vtime)
		bq.tenants.Push(tf, tf.vtime, tf.order)
	}

	w.prev, w.next = bq.tail, nil
	if bq.tail != nil {
		bq.tail.next = w
	} else {
		bq.head = w
	}
	bq.tail = w
	bq.count++
	bq.tokens += w.cost
	pq.queued++
	w.state = stateQueued
}

// remove takes w out of its band's queue, wherever it is.
func (pq *poolQueue) remove(w *waiter, credit float64) {
	bq := &pq.bands[w.band.index()]
	sf := w.session
	tf := bq.flows[w.tenant]
	sf.turns.Remove(w.heapIdx)
	w.session = nil
	if sf.turns.Len() == 0 {
		tf.sessions.Remove(sf.heapIdx)
		if sf.key != "" {
			delete(tf.byKey, sf.key)
		}
		pq.freeSession(sf)
	} else {
		sf.rekey(credit)
		tf.sessions.Fix(sf.heapIdx, sf.sortKey, sf.turns.At(0).seq)
	}
	if tf.sessions.Len() == 0 {
		bq.tenants.Remove(tf.heapIdx)
	} else {
		bq.tenants.Fix(tf.heapIdx, tf.vtime, tf.order)
	}

	if w.prev != nil {
		w.prev.next = w.next
	} else {
		bq.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		bq.tail = w.prev
	}
	w.prev, w.next = nil, nil
	bq.count--
	bq.tokens -= w.cost
	pq.queued--
	if bq.count == 0 {
		bq.credit = 0 // no banking a share while idle
	}
	w.state = stateFree
}

// pickBand is the band to serve next among those that may be dispatched
// now: with shared slots free (shared), a less urgent band that is owed
// its guaranteed share (at least a token, so float residue owes nothing),
// else the most urgent backlogged band, Background only where some engine
// has slack for it (background); without shared slots, the Interactive
// band if allowed (reserved slots, or a held pool's reserve) and it has
// turns, else Background if an engine of a lent pool has slack for it
// (background without shared). nil means nothing may go.
func (pq *poolQueue) pickBand(shared, interactive, background bool) *bandQueue {
	if !shared {
		if bq := &pq.bands[Interactive.index()]; interactive && bq.count > 0 {
			return bq
		}
		if bq := &pq.bands[Background.index()]; background && bq.count > 0 {
			return bq
		}
		return nil
	}
	for i := 1; i < numBands; i++ {
		if bq := &pq.bands[i]; bq.count > 0 && bq.credit >= 1 && (i != Background.index() || background) {
			return bq
		}
	}
	for i := range pq.bands {
		if pq.bands[i].count > 0 && (i != Background.index() || background) {
			return &pq.bands[i]
		}
	}
	return nil
}

// pop takes the next turn from bq: the tenant with the smallest virtual
// time, its session with the smallest key, that session's best turn. It
// advances the virtual times and the bands' share credits.
func (pq *poolQueue) pop(bq *bandQueue, cfg *FlowControl) *waiter {
	tf := bq.tenants.At(0)
	sf := tf.sessions.At(0)
	w := sf.turns.At(0)
	cost := float64(w.cost)

	bq.vtime = tf.vtime
	tf.vtime += cost / tf.state.weight
	tf.svtime = sf.vtime
	sf.vtime += cost

	i := bq.band.index()
	urgentBacklog := false
	for j := range i {
		urgentBacklog = urgentBacklog || pq.bands[j].count > 0
	}
	if urgentBacklog {
		bq.credit -= cost
	} else {
		bq.credit = 0
	}
	for j := i + 1; j < numBands; j++ {
		lower := &pq.bands[j]
		if share := cfg.Bands.band(lower.band).MinShare; lower.count > 0 && share > 0 {
			lower.credit += cost * share / (1 - share)
		}
	}

	pq.remove(w, cfg.PriorityCredit)
	return w
}

func (pq *poolQueue) newSession(key string, vtime float64) *sessionFlow {
	var sf *sessionFlow
	if n := len(pq.free); n > 0 {
		sf, pq.free = pq.free[n-1], pq.free[:n-1]
	} else {
		sf = &sessionFlow{turns: heap.NewIndexed[float64](func(w *waiter, i int) { w.heapIdx = i })}
	}
	sf.key, sf.vtime, sf.heapIdx = key, vtime, -1
	return sf
}

// maxFreeSessions bounds the pool's free list of session flows.
const maxFreeSessions = 1024

func (pq *poolQueue) freeSession(sf *sessionFlow) {
	if len(pq.free) < maxFreeSessions {
		sf.key = ""
		sf.turns.Reset()
		pq.free = append(pq.free, sf)
	}
}

func (sf *sessionFlow) rekey(credit float64) {
	sf.sortKey = sf.vtime - credit*sf.turns.At(0).priority
}
