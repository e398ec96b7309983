package turns

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Controller is flow control for the whole gateway: one per process,
// shared by every request goroutine. Create it with New and stop it with
// Close.
type Controller struct {
	cfg     atomic.Pointer[FlowControl]
	tenants atomic.Pointer[tenantSet]

	now     func() time.Time
	random  func() float64 // called under mu
	epoch   time.Time      // origin of the queues' age credit
	reg     prometheus.Registerer
	metrics *metrics
	waiters sync.Pool

	mu struct {
		sync.Mutex
		// protects the fields below, every poolQueue and tenantState, and
		// the waiters they hold.
		closed       bool
		pools        map[string]*poolQueue
		tenants      map[string]*tenantState
		seq          uint64
		activeWeight float64 // sum of weights of tenants holding turns
		heldTokens   int64   // tokens of all turns held
		// tickIdle is set by a tick that left no turn queued: the ticker
		// then waits idleEvery, and the next turn queued kicks it.
		tickIdle bool
	}

	ticker bool
	// idleEvery spaces the ticks while no turn is queued
	// (idleTickInterval); kick wakes the ticker from them.
	idleEvery time.Duration
	kick      chan struct{}
	// started runs Start's work once (or, never started, Close's).
	started sync.Once
	stop    chan struct{}
	done    chan struct{}
}

// tenantSet is an immutable snapshot of the tenants.
type tenantSet struct {
	byName map[string]Tenant
}

// lookup is the named tenant, or the defaults for an unknown one.
func (s *tenantSet) lookup(name string) Tenant {
	if t, ok := s.byName[name]; ok {
		return t
	}
	t := Tenant{Name: name}
	t.EnsureDefaults()
	return t
}

// Option configures a Controller in New.
type Option func(*Controller)

// WithRegisterer registers the Controller's metrics on reg. Without it the
// metrics are kept but not exported.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *Controller) { c.reg = reg }
}

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option {
	return func(c *Controller) { c.now = now }
}

// WithRandom replaces the random source of the shed curve: a function of
// uniform floats in [0,1), e.g. rand.New(rand.NewPCG(1, 2)).Float64. It is
// called under the Controller's lock, so it need not be safe for concurrent
// use.
func WithRandom(f func() float64) Option {
	return func(c *Controller) { c.random = f }
}

// withoutTicker leaves ticks to the test.
func withoutTicker() Option {
	return func(c *Controller) { c.ticker = false }
}

// New checks cfg and builds a Controller. It starts nothing: Start starts
// its ticker.
func New(cfg Config, opts ...Option) (*Controller, error) {
	c := &Controller{now: time.Now, random: rand.Float64, ticker: true, idleEvery: idleTickInterval}
	for _, o := range opts {
		o(c)
	}
	fc := cfg.FlowControl
	fc.EnsureDefaults()
	set, err := newTenantSet(cfg.Tenants)
	if err = errors.Join(fc.Validate(), err); err != nil {
		return nil, err
	}
	c.metrics, err = newMetrics(c.reg)
	if err != nil {
		return nil, err
	}
	if c.reg != nil {
		if err := c.reg.Register(newDemandCollector(c)); err != nil {
			return nil, err
		}
	}
	c.cfg.Store(&fc)
	c.tenants.Store(set)
	c.epoch = c.now()
	c.mu.pools = make(map[string]*poolQueue)
	c.mu.tenants = make(map[string]*tenantState)
	c.waiters.New = func() any { return &waiter{ctl: c, ready: make(chan struct{}, 1)} }
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	c.kick = make(chan struct{}, 1)
	return c, nil
}

// Start starts the ticker goroutine that re-measures load and expires
// queued turns between Acquire and Release calls; it runs until Close,
// whatever becomes of ctx. Calls after the first do nothing.
func (c *Controller) Start(ctx context.Context) error {
	c.started.Do(func() {
		if c.ticker {
			go c.run()
		} else {
			close(c.done)
		}
	})
	return nil
}

func newTenantSet(ts []Tenant) (*tenantSet, error) {
	set := &tenantSet{byName: make(map[string]Tenant, len(ts))}
	ts = append([]Tenant(nil), ts...)
	for i := range ts {
		ts[i].EnsureDefaults()
		set.byName[ts[i].Name] = ts[i]
	}
	return set, ValidateTenants(ts)
}

// SetConfig replaces the flowControl section. Queued turns keep their
// places; new limits apply from the next decision.
func (c *Controller) SetConfig(fc FlowControl) error {
	fc.EnsureDefaults()
	if err := fc.Validate(); err != nil {
		return err
	}
	c.cfg.Store(&fc)
	return nil
}

// Config returns the flowControl section in force, defaults filled.
func (c *Controller) Config() FlowControl { return *c.cfg.Load() }

// SetTenants replaces the tenants. Fair-share positions carry over;
// weights and limits apply from the next decision.
func (c *Controller) SetTenants(ts []Tenant) error {
	set, err := newTenantSet(ts)
	if err != nil {
		return err
	}
	c.tenants.Store(set)
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.mu.tenants {
		c.tenantLocked(name, set)
	}
	return nil
}

// Tenant returns the named tenant's settings, defaults filled; an unknown
// tenant gets the defaults.
func (c *Controller) Tenant(name string) Tenant { return c.tenants.Load().lookup(name) }

// Ticket is a dispatched turn's right to run. The caller of Acquire owns it
// and must call Release exactly once, when the request to the engine has
// ended (however it ended). The zero Ticket's Release does nothing.
type Ticket struct {
	w      *waiter
	gen    uint64
	band   Band
	waited time.Duration
	onLent bool
}

// Band is the band the turn was dispatched in.
func (t Ticket) Band() Band { return t.band }

// OnLent reports whether the turn was granted on the room of a lent pool's
// idle engines (Measurement.LentSlack): it must be sent to a lent pool's
// endpoint, and only there. A turn not granted so must not be sent to one.
func (t Ticket) OnLent() bool { return t.onLent }

// Waited is how long the turn waited in Acquire.
func (t Ticket) Waited() time.Duration { return t.waited }

// Acquire admits t to flow control and blocks until it may be dispatched
// to pool. It returns a Ticket whose Release the caller owes, or, with the
// zero Ticket: a *ShedError (errors.Is ErrShed) when the turn is refused or
// dropped from the queue, or ctx's error when ctx ends first. Acquire reads
// t and does not keep it.
func (c *Controller) Acquire(ctx context.Context, t *Turn, pool Capacity) (Ticket, error) {
	if err := ctx.Err(); err != nil {
		return Ticket{}, err
	}
	cfg := c.cfg.Load()
	set := c.tenants.Load()
	now := c.now()
	m := pool.Measure(now, cfg)
	m.measured()

	w := c.waiters.Get().(*waiter)
	w.turn = *t
	if w.turn.Enqueued.IsZero() {
		w.turn.Enqueued = now
	}
	w.cost = t.Cost()
	w.priority = baseScore(&w.turn) - ScoreAgePerSecond*w.turn.Enqueued.Sub(c.epoch).Seconds()
	w.queuedAt = now
	w.cap = pool

	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		c.putWaiter(w)
		return Ticket{}, shed(ReasonShuttingDown, cfg.RetryAfter)
	}
	w.tenant = c.tenantLocked(t.Tenant, set)
	if t.Band.Valid() {
		w.band = t.Band.capAt(w.tenant.cfg.MaxBand)
	} else {
		w.band = Classify(w.tenant.cfg, t.Hints)
	}
	if n, ok := pool.(interactiveNoter); ok && w.band == Interactive {
		n.noteInteractive(now)
	}
	w.pool = c.poolLocked(pool)
	c.mu.seq++
	w.seq = c.mu.seq
	c.expireLocked(w.pool, &m, now, cfg)
	if err := c.admitLocked(w, &m, cfg); err != nil {
		c.metrics.shedOne(w.band, err.Reason)
		c.mu.Unlock()
		c.putWaiter(w)
		return Ticket{}, err
	}
	w.pool.push(w, cfg.PriorityCredit)
	w.tenant.queued[w.band.index()].Inc()
	c.dispatchLocked(w.pool, &m, now, cfg)
	if w.state == stateQueued && c.mu.tickIdle {
		c.mu.tickIdle = false
		select {
		case c.kick <- struct{}{}:
		default: // a kick the ticker has not taken yet will do
		}
	}
	c.mu.Unlock()

	return c.wait(ctx, w, cfg)
}

// wait blocks until w is dispatched or shed, or ctx ends.
func (c *Controller) wait(ctx context.Context, w *waiter, cfg *FlowControl) (Ticket, error) {
	select {
	case <-w.ready:
		return c.collect(w)
	case <-ctx.Done():
	}
	c.mu.Lock()
	if w.state == stateQueued {
		w.pool.remove(w, cfg.PriorityCredit)
		w.tenant.queued[w.band.index()].Dec()
		c.unholdLocked(w.tenant, w.cost)
		c.metrics.cancelledBy[w.band.index()].Inc()
		c.mu.Unlock()
		c.putWaiter(w)
		return Ticket{}, ctx.Err()
	}
	c.mu.Unlock()
	// Dispatched or shed while we were looking away: the send is on its way.
	<-w.ready
	tk, err := c.collect(w)
	if err != nil {
		return Ticket{}, err
	}
	tk.Release(0) // nothing ran
	return Ticket{}, ctx.Err()
}

// collect turns a waiter that was signalled into Acquire's result.
func (c *Controller) collect(w *waiter) (Ticket, error) {
	if err := w.err; err != nil {
		c.putWaiter(w)
		return Ticket{}, err
	}
	return Ticket{w: w, gen: w.gen, band: w.band, waited: w.grantedAt.Sub(w.queuedAt), onLent: w.onLent}, nil
}

// Release ends the turn: it frees the turn's slot in its pool, counts
// actualTokens (input plus output as the engine counted them; negative:
// the estimate) as the tenant's, and dispatches whatever the freed slot
// lets through. Calling it twice panics.
func (t Ticket) Release(actualTokens int) {
	w := t.w
	if w == nil {
		return
	}
	c := w.ctl
	cfg := c.cfg.Load()
	now := c.now()
	m := w.cap.Measure(now, cfg)
	m.measured()

	c.mu.Lock()
	if w.gen != t.gen || w.state != stateDispatched {
		c.mu.Unlock()
		panic("turns: ticket released twice")
	}
	pq := w.pool
	if w.onLent {
		pq.lentDispatched--
	} else {
		pq.dispatched--
	}
	if w.band == Interactive {
		pq.interactive--
	}
	pq.dispatchedTokens -= w.cost
	pq.noteHold(now.Sub(w.grantedAt))
	pq.inFlight.Dec()
	c.unholdLocked(w.tenant, w.cost)
	if actualTokens >= 0 {
		w.tenant.tokens.Add(float64(actualTokens))
	} else {
		w.tenant.tokens.Add(float64(w.cost))
	}
	w.gen++
	w.state = stateFree
	c.expireLocked(pq, &m, now, cfg)
	c.dispatchLocked(pq, &m, now, cfg)
	c.mu.Unlock()
	c.putWaiter(w)
}

// poolLocked returns the queues of pool, creating them on first use.
func (c *Controller) poolLocked(pool Capacity) *poolQueue {
	name := pool.Name()
	pq := c.mu.pools[name]
	if pq == nil {
		pq = newPoolQueue(name)
		pq.saturation = c.metrics.saturation.WithLabelValues(name)
		pq.lowerSaturation = c.metrics.lowerSaturation.WithLabelValues(name)
		pq.inFlight = c.metrics.inFlight.WithLabelValues(name)
		c.mu.pools[name] = pq
	}
	pq.cap = pool
	return pq
}

// dispatchLocked grants queued turns while the pool has room for them:
// work-conserving per band, a turn waits only while no available endpoint
// has room for its band (Measurement.Open for Interactive, Lower.Open for
// Standard, Slack for Background), the pool's slots for its band are taken, or
// this pass has granted the open endpoints' token or queue room for its
// band. The lower bands share the slots above the Interactive reserve, and
// only below HoldAt; Interactive turns may also take the reserved slots,
// and while the pool is held they may still run as many as the reserve
// (any number up to the slots when its engines schedule by priority,
// Measurement.Prioritized), so a person's turn never waits behind a held
// agent backlog.
func (c *Controller) dispatchLocked(pq *poolQueue, m *Measurement, now time.Time, cfg *FlowControl) {
	pq.saturation.Set(m.Saturation)
	pq.lowerSaturation.Set(m.Lower.Saturation)
	// The rooms are what this pass may still grant: the measurement does
	// not see a grant until its request is sent. The first turn of a pass
	// goes whatever its size, so a prompt larger than any endpoint's room
	// is not held for ever. A grant of any band takes from both rooms.
	all := newPassRoom(m.Room, m.QueueRoom, pq, m)
	lower := newPassRoom(m.Lower.Room, m.Lower.QueueRoom, pq, m)
	// Background turns take only endpoints whose engines queue nothing,
	// one a pass each (the next measurement sees the grant in flight).
	// Lent pools' idle engines take Background turns besides, one a pass
	// each, whatever the room of the others, less the turns granted there
	// and not yet sent.
	slack := m.Slack
	lentSlack := pq.lentRoom(m)
	granted := false
	for pq.queued > 0 {
		open := m.Open > 0 && m.Saturation < cfg.HoldAt && all.left(granted)
		shared := open && lower.left(granted) && pq.roomForLower(m, cfg)
		interactive := pq.dispatched < m.Slots && (open || pq.interactive < m.Reserved || m.Prioritized)
		onSlack := shared && slack > 0
		bq := pq.pickBand(shared, interactive, onSlack || lentSlack > 0)
		if bq == nil {
			return
		}
		w := pq.pop(bq, cfg)
		onLent := w.band == Background && !onSlack
		if onLent {
			lentSlack-- // the lent pool's room, not the others'
		} else {
			all.take(w.cost)
			lower.take(w.cost)
			if w.band == Background {
				slack--
			}
			granted = true
		}
		c.grantLocked(pq, w, onLent, now)
	}
}

// grantLocked dispatches w, taken out of pq's queue: its Ticket goes to
// its Acquire.
func (c *Controller) grantLocked(pq *poolQueue, w *waiter, onLent bool, now time.Time) {
	w.onLent = onLent
	if onLent {
		pq.lentDispatched++
	} else {
		pq.dispatched++
	}
	pq.dispatchedTokens += w.cost
	w.tenant.queued[w.band.index()].Dec()
	if w.band == Interactive {
		pq.interactive++
	}
	pq.dispatchSeq++
	w.dispatchSeq = pq.dispatchSeq
	w.grantedAt = now
	w.state = stateDispatched
	w.tenant.wait[w.band.index()].Observe(now.Sub(w.queuedAt).Seconds())
	c.metrics.admittedBy[w.band.index()].Inc()
	pq.inFlight.Inc()
	w.ready <- struct{}{}
}

// passRoom is one dispatch pass's token and queue room for a class of
// bands.
type passRoom struct {
	tokens  int64 // negative: unbounded
	queue   int   // negative: unbounded
	bounded bool  // queue was measured bounded
}

// newPassRoom starts a pass with the measured room, the queue room less
// the turns granted and not yet sent (tickets outstanding beyond the
// requests in flight), so that turns dispatched together do not all land
// in one engine's queue.
func newPassRoom(tokens int64, queue int, pq *poolQueue, m *Measurement) passRoom {
	r := passRoom{tokens: tokens, queue: queue, bounded: queue >= 0}
	if r.bounded {
		r.queue -= max(pq.dispatched-int(m.InFlight), 0)
	}
	return r
}

// left reports whether the pass may grant another turn of the class.
func (r *passRoom) left(granted bool) bool {
	tokens := r.tokens < 0 || r.tokens > 0 || !granted
	queue := !r.bounded || r.queue > 0
	return tokens && queue
}

// take counts a grant of cost tokens against the room.
func (r *passRoom) take(cost int64) {
	if r.tokens > 0 {
		r.tokens = max(r.tokens-cost, 0)
	}
	if r.queue > 0 {
		r.queue--
	}
}

// roomForLower reports whether, as measured by m, the pool has room for a
// Standard or Background turn now: an endpoint with room for the lower
// bands, a shared slot, and saturation below HoldAt.
func (pq *poolQueue) roomForLower(m *Measurement, cfg *FlowControl) bool {
	return m.Lower.Open > 0 && m.Saturation < cfg.HoldAt && pq.dispatched < m.Slots-m.Reserved
}

// roomForBand reports whether, as measured by m, the pool has room for a
// turn of band b now: roomForLower for the lower bands, and for Background
// also an idle engine of a lent pool.
func (pq *poolQueue) roomForBand(b Band, m *Measurement, cfg *FlowControl) bool {
	if b == Background && pq.lentRoom(m) > 0 {
		return true
	}
	return pq.roomForLower(m, cfg)
}

// lentRoom is how many Background turns the lent pools' idle engines may
// still be granted, as measured by m: their slack less the turns granted
// there and not yet sent, within their slots.
func (pq *poolQueue) lentRoom(m *Measurement) int {
	unsent := max(pq.lentDispatched-int(m.LentInFlight), 0)
	return max(min(m.LentSlack-unsent, m.LentSlots-pq.lentDispatched), 0)
}

// expireLocked decides for every queued turn of the pool, measured as m,
// that its band's TTL is about to end (ttlRule): an Interactive or
// Standard turn is sent to an engine, past the pool's room, in time for
// the best engine's queue (Measurement.Backlog, at the pool's hold time)
// to start it within its TTL, and shed at once with 503 past-ttl when
// that queue alone is longer than the TTL; a Background turn (shed
// first) and a turn of a pool with no
// available endpoint wait their whole TTL and are shed then: 408
// ttl-expired, or 503 no-endpoints when the pool still has no available
// endpoint, which is then why the turn never ran.
func (c *Controller) expireLocked(pq *poolQueue, m *Measurement, now time.Time, cfg *FlowControl) {
	seqs := m.Seqs
	if seqs <= 0 {
		seqs = max(m.Slots, 1)
	}
	// Turns granted and not yet sent, and those this pass sends, are
	// ahead of the next one sent.
	ahead := max(pq.dispatched-int(m.InFlight), 0)
	hold := time.Duration(pq.hold * float64(time.Second))
	for i := range pq.bands {
		bq := &pq.bands[i]
		// Background turns may also run on lent pools' endpoints.
		reason := ReasonTTLExpired
		if m.Endpoints == 0 && (bq.band != Background || m.LentSlots == 0) {
			reason = ReasonNoEndpoints
		}
		sendable := m.Endpoints > 0 && bq.band != Background
		ttl := cfg.Bands.band(bq.band).TTL
		for bq.head != nil {
			w := bq.head
			wait := time.Duration((m.Backlog + float64(ahead)/float64(seqs)) * float64(hold))
			switch ttlRule(ttl-now.Sub(w.queuedAt), wait, ttl, cfg.TickInterval, sendable) {
			case ttlWait:
				// Later turns of the band came later: they wait too.
			case ttlSend:
				pq.remove(w, cfg.PriorityCredit)
				c.grantLocked(pq, w, false, now)
				c.metrics.sentBeforeTTL[i].Inc()
				ahead++
				continue
			case ttlShed:
				c.dropLocked(w, shed(ReasonPastTTL, max(cfg.RetryAfter, wait)), cfg)
				continue
			case ttlExpire:
				c.dropLocked(w, shed(reason, cfg.RetryAfter), cfg)
				continue
			}
			break
		}
	}
}

// ttlAction is what becomes of a queued turn as its band's TTL nears.
type ttlAction uint8

const (
	ttlWait   ttlAction = iota // it waits on in the queue
	ttlSend                    // it goes to the best engine now
	ttlShed                    // no engine would start it within its TTL: shed it now
	ttlExpire                  // its TTL is spent: shed it
)

// ttlRule is what becomes of a queued turn with left of its band's ttl,
// when a turn sent now to the best engine would wait there about wait
// before it starts and the queue is looked at again within tick. A turn
// that may be sent (sendable) is shed as soon as that wait is past its
// whole TTL: every engine's queue already promises it a start past it.
// Otherwise it waits in the gateway's queue while it can still be sent in
// time at the next look or the one after, allowing for a late one, and
// is then sent. A turn that may not be sent waits its whole TTL.
func ttlRule(left, wait, ttl, tick time.Duration, sendable bool) ttlAction {
	switch {
	case !sendable && left <= 0:
		return ttlExpire
	case !sendable:
		return ttlWait
	case wait > ttl:
		return ttlShed
	case left > wait+2*tick:
		return ttlWait
	}
	return ttlSend
}

// dropLocked takes a queued turn out of its queue and hands Acquire err.
func (c *Controller) dropLocked(w *waiter, err *ShedError, cfg *FlowControl) {
	w.pool.remove(w, cfg.PriorityCredit)
	w.tenant.queued[w.band.index()].Dec()
	c.unholdLocked(w.tenant, w.cost)
	c.metrics.shedOne(w.band, err.Reason)
	w.err = err
	w.state = stateDone
	w.ready <- struct{}{}
}

// tick expires and dispatches in every pool against fresh measurements,
// and reports whether turns are still queued; when none is, it notes that
// the ticker idles (tickIdle). The Controller's own goroutine calls it
// (run).
func (c *Controller) tick() (queued bool) {
	cfg := c.cfg.Load()
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pq := range c.mu.pools {
		m := pq.cap.Measure(now, cfg)
		m.measured()
		c.expireLocked(pq, &m, now, cfg)
		c.dispatchLocked(pq, &m, now, cfg)
		queued = queued || pq.queued > 0
	}
	c.mu.tickIdle = !queued
	return queued
}

// idleTickInterval spaces the ticks while no turn is queued: they only
// refresh the pools' saturation gauges, which every Acquire and Release
// refreshes besides.
const idleTickInterval = time.Second

// run ticks every TickInterval while turns are queued and every
// idleEvery while none is, until the next turn queued kicks it: a
// gateway whose engines have room wakes for its turns, not twenty times a
// second.
func (c *Controller) run() {
	defer close(c.done)
	t := time.NewTimer(c.cfg.Load().TickInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.kick:
			t.Stop()
		}
		d := c.cfg.Load().TickInterval
		if !c.tick() {
			d = max(d, c.idleEvery)
		}
		t.Reset(d)
	}
}

// Len is the number of turns queued in all pools.
func (c *Controller) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, pq := range c.mu.pools {
		n += pq.queued
	}
	return n
}

// Close stops the ticker, waiting for it up to ctx, and sheds every
// queued turn with 503 shutting-down; later Acquires are shed the same
// way. Outstanding tickets may still be released. Close is idempotent.
func (c *Controller) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil
	}
	c.mu.closed = true
	cfg := c.cfg.Load()
	for _, pq := range c.mu.pools {
		for i := range pq.bands {
			for w := pq.bands[i].head; w != nil; w = pq.bands[i].head {
				c.dropLocked(w, shed(ReasonShuttingDown, cfg.RetryAfter), cfg)
			}
		}
	}
	c.mu.Unlock()
	close(c.stop)
	c.started.Do(func() { close(c.done) }) // never started: nothing to join
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("turns: close: %w", ctx.Err())
	}
}

// putWaiter returns w to the free pool, dropping what it referenced.
func (c *Controller) putWaiter(w *waiter) {
	w.turn = Turn{}
	w.cap, w.pool, w.tenant, w.session, w.err = nil, nil, nil, nil, nil
	w.state = stateFree
	c.waiters.Put(w)
}
