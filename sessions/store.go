package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/internal/lru"
)

// Defaults for Options.
const (
	// DefaultMaxSessions bounds the sessions kept in memory.
	DefaultMaxSessions = 100_000
	// DefaultTTL is how long an idle session is remembered: longer than any
	// engine keeps an idle prefix cached.
	DefaultTTL = time.Hour
	// DefaultSharedPinRefresh is the PinRefresh the assembly sets for
	// gateways that share a store (Redis state).
	DefaultSharedPinRefresh = time.Second
	// DefaultGapSmoothing is the weight of the newest gap in MeanGap.
	DefaultGapSmoothing = 0.3
)

// State is a session as the Store knows it. Values are copies.
type State struct {
	// Tenant and Key name the session; a key is scoped by its tenant.
	Tenant, Key string
	// Turns is the number of turns taken, the current one included.
	Turns int
	// FirstSeen and LastSeen are when the first and the latest turn started.
	FirstSeen, LastSeen time.Time
	// LastFinished is when the latest finished turn ended; zero if none.
	LastFinished time.Time
	// MeanGap is a moving average of the time between the end of one turn
	// (its start when the end was not reported) and the start of the next;
	// zero before the second turn.
	MeanGap time.Duration
	// Endpoint is the ID of the pinned endpoint; "" when unpinned.
	Endpoint string
	// PrefixBlocks is how many blocks of the session's prompt the pinned
	// endpoint held when the router last looked.
	PrefixBlocks int
}

// Options configure a Store. The zero value takes every default.
type Options struct {
	// MaxSessions bounds the sessions in memory; beyond it the least
	// recently seen is forgotten. Default DefaultMaxSessions.
	MaxSessions int `yaml:"maxSessions" json:"maxSessions"`
	// TTL forgets a session this long after its last turn. Default 1h.
	TTL time.Duration `yaml:"ttl" json:"ttl"`
	// GapSmoothing is the weight, in (0, 1], of the newest gap in MeanGap.
	// Default 0.3.
	GapSmoothing float64 `yaml:"gapSmoothing" json:"gapSmoothing"`
	// Pins persists pins. Nil keeps them in memory only: a restart loses them.
	Pins PinStore `yaml:"-" json:"-"`
	// PinRefresh, when positive, shares pins between gateways on one
	// store: Pinned reads a session's pin from Pins again when its copy
	// here is older than this, or when this gateway does not know the
	// session, and adopts a pin written there later than its own. So a
	// session that alternates gateways stays on the endpoint the last
	// one chose. Such a read is one store read on the routing path, at
	// most once per session per PinRefresh; it is bounded by
	// pinReadTimeout, and on failure the copy here is used. 0, the
	// default, reads the store only at start (LoadPins): right for one
	// gateway.
	PinRefresh time.Duration `yaml:"pinRefresh" json:"pinRefresh"`
	// Metrics is where the Store registers its collectors; nil registers none.
	Metrics prometheus.Registerer `yaml:"-" json:"-"`
	// Logger hears what Start restores of the pins. Nil: slog.Default().
	Logger *slog.Logger `yaml:"-" json:"-"`
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.GapSmoothing == 0 {
		o.GapSmoothing = DefaultGapSmoothing
	}
}

// Validate reports every problem of o at once.
func (o *Options) Validate() error {
	var errs []error
	if o.MaxSessions < 0 {
		errs = append(errs, fmt.Errorf("sessions: maxSessions %d is negative", o.MaxSessions))
	}
	if o.TTL < 0 {
		errs = append(errs, fmt.Errorf("sessions: ttl %v is negative", o.TTL))
	}
	if o.PinRefresh < 0 {
		errs = append(errs, fmt.Errorf("sessions: pinRefresh %v is negative", o.PinRefresh))
	}
	if !(o.GapSmoothing >= 0 && o.GapSmoothing <= 1) {
		errs = append(errs, fmt.Errorf("sessions: gapSmoothing %v is not in [0, 1]", o.GapSmoothing))
	}
	return errors.Join(errs...)
}

// Store keeps session state in bounded memory. Create it with NewStore;
// Start brings back the pins of a previous run and starts the sweep of
// expired sessions, Close stops it.
type Store struct {
	opts    Options
	shards  []shard
	metrics storeMetrics

	// departed maps the ID of each endpoint that left the fleet in the
	// last TTL to when it left (EndpointLeft): a pin to it set no later is
	// gone. It is read on every pin lookup and replaced, copied, when an
	// endpoint leaves; departedMu serialises those writers.
	departed   atomic.Pointer[map[string]time.Time]
	departedMu sync.Mutex

	// stop ends the sweep Start starts, which closes swept.
	stop   chan struct{}
	swept  chan struct{}
	closed sync.Once
}

// sweepInterval is how often the sweep Start starts forgets expired
// sessions (Sweep): Touch forgets them as it meets them, the sweep the
// ones never seen again.
const sweepInterval = time.Minute

// shard is one lock's worth of sessions, with its own LRU.
type shard struct {
	mu struct {
		sync.Mutex
		// protects the fields below
		// sessions are the shard's, most recently seen first, bounded by
		// the shard's part of MaxSessions.
		sessions *lru.Cache[skey, *entry]
	}
	_ [64]byte // keeps neighbouring shards' locks off one cache line
}

// skey scopes a session key by its tenant.
type skey struct{ tenant, key string }

type entry struct {
	st State
	// pinAt is when the pin here was set (by Pin, or adopted from the
	// PinStore at the time it was written there); pinChecked when the
	// PinStore was last read for it (Options.PinRefresh).
	pinAt, pinChecked time.Time
}

type storeMetrics struct {
	evictedTTL, evictedCapacity prometheus.Counter
	pinChanges                  [numPinReasons]prometheus.Counter
	pinStoreErrors              prometheus.Counter
}

// NewStore returns an empty Store; Start (or LoadPins) brings back the
// pins of a previous run.
func NewStore(opts Options) (*Store, error) {
	opts.EnsureDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	n := 16
	if opts.MaxSessions < n*64 {
		// A small store is exact LRU; a large one is LRU per shard.
		n = 1
	}
	s := &Store{opts: opts, shards: make([]shard, n), stop: make(chan struct{})}
	for i := range s.shards {
		s.shards[i].mu.sessions = lru.NewCache[skey, *entry](int64((opts.MaxSessions+n-1)/n), nil)
	}
	if err := s.initMetrics(opts.Metrics); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) initMetrics(r prometheus.Registerer) error {
	evicted := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_sessions_evicted_total",
		Help: "Sessions forgotten, by reason (ttl, capacity).",
	}, []string{"reason"})
	pins := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_session_pin_changes_total",
		Help: "Session pins set, moved or removed, by reason.",
	}, []string{"reason"})
	storeErrs := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "turnpike_session_pin_store_errors_total",
		Help: "Failed writes of session pins to the pin store.",
	})
	active := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "turnpike_sessions",
		Help: "Sessions in memory.",
	}, func() float64 { return float64(s.Len()) })
	if r != nil {
		for _, c := range []prometheus.Collector{evicted, pins, storeErrs, active} {
			if err := r.Register(c); err != nil {
				return fmt.Errorf("sessions: registering metrics: %w", err)
			}
		}
	}
	s.metrics.evictedTTL = evicted.WithLabelValues("ttl")
	s.metrics.evictedCapacity = evicted.WithLabelValues("capacity")
	for i := range s.metrics.pinChanges {
		s.metrics.pinChanges[i] = pins.WithLabelValues(PinReason(i).String())
	}
	s.metrics.pinStoreErrors = storeErrs
	return nil
}

func (s *Store) shard(k skey) *shard {
	if len(s.shards) == 1 {
		return &s.shards[0]
	}
	h := xxhash.Sum64String(k.key) ^ (xxhash.Sum64String(k.tenant) * 0x9e3779b97f4a7c15)
	return &s.shards[h%uint64(len(s.shards))]
}

func (s *Store) expired(e *entry, now time.Time) bool {
	return now.Sub(e.st.LastSeen) > s.opts.TTL
}

// Touch records the start of a turn of tenant's session key at now and
// returns the session's state after it. An expired session starts over.
// key must not be empty.
func (s *Store) Touch(tenant, key string, now time.Time) State {
	k := skey{tenant, key}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.mu.sessions.Get(k) // now the most recently seen
	if ok && s.expired(e, now) {
		sh.mu.sessions.Remove(k)
		s.metrics.evictedTTL.Inc()
		ok = false
	}
	if !ok {
		e = &entry{st: State{Tenant: tenant, Key: key, FirstSeen: now}}
	} else {
		since := e.st.LastSeen
		if e.st.LastFinished.After(since) {
			since = e.st.LastFinished
		}
		gap := max(now.Sub(since), 0)
		if e.st.Turns <= 1 || e.st.MeanGap == 0 {
			e.st.MeanGap = gap
		} else {
			a := s.opts.GapSmoothing
			e.st.MeanGap = time.Duration(math.Round(a*float64(gap) + (1-a)*float64(e.st.MeanGap)))
		}
	}
	s.dropDepartedLocked(e)
	e.st.Turns++
	e.st.LastSeen = now
	if ok {
		s.expireLocked(sh, now)
	} else {
		s.addLocked(sh, k, e, now)
	}
	return e.st
}

// Finish records that the current turn of tenant's session key ended at
// now, so that the next gap is measured from here. Unknown sessions are
// ignored.
func (s *Store) Finish(tenant, key string, now time.Time) {
	k := skey{tenant, key}
	sh := s.shard(k)
	sh.mu.Lock()
	if e, ok := sh.mu.sessions.Peek(k); ok {
		e.st.LastFinished = now
	}
	sh.mu.Unlock()
}

// Get returns tenant's session key, if it is known and not expired at now.
func (s *Store) Get(tenant, key string, now time.Time) (State, bool) {
	k := skey{tenant, key}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.mu.sessions.Peek(k)
	if !ok || s.expired(e, now) {
		return State{}, false
	}
	s.dropDepartedLocked(e)
	return e.st, true
}

// Pinned returns the endpoint tenant's session key is pinned to and the
// prefix it held, or "" when the session is unknown, expired or unpinned.
// It is on the routing hot path and does not allocate.
//
// With Options.PinRefresh it may read the PinStore first (see there);
// only that read allocates.
func (s *Store) Pinned(tenant, key string, now time.Time) (endpointID string, prefixBlocks int) {
	if s.opts.PinRefresh > 0 && s.opts.Pins != nil {
		return s.pinnedShared(tenant, key, now)
	}
	st, _ := s.Get(tenant, key, now)
	return st.Endpoint, st.PrefixBlocks
}

// pinReadTimeout bounds a read of the PinStore on the routing path.
const pinReadTimeout = 250 * time.Millisecond

// pinnedShared is Pinned for pins shared with other gateways: the copy
// here while it is fresh, else the PinStore's pin when that was written
// later than the one here.
func (s *Store) pinnedShared(tenant, key string, now time.Time) (string, int) {
	k := skey{tenant, key}
	sh := s.shard(k)
	sh.mu.Lock()
	e, ok := sh.mu.sessions.Peek(k)
	if ok && !s.expired(e, now) && now.Sub(e.pinChecked) < s.opts.PinRefresh {
		s.dropDepartedLocked(e)
		ep, blocks := e.st.Endpoint, e.st.PrefixBlocks
		sh.mu.Unlock()
		return ep, blocks
	}
	sh.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), pinReadTimeout)
	p, found, err := s.opts.Pins.GetPin(ctx, tenant, key)
	cancel()
	if err != nil {
		s.metrics.pinStoreErrors.Inc()
	}

	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok = sh.mu.sessions.Peek(k)
	if ok && s.expired(e, now) {
		sh.mu.sessions.Remove(k)
		s.metrics.evictedTTL.Inc()
		ok = false
	}
	if !ok {
		if !found || p.Endpoint == "" || now.Sub(p.At) > s.opts.TTL {
			return "", 0
		}
		// A session another gateway has served: known here from now.
		seen := p.At
		if seen.IsZero() || seen.After(now) {
			seen = now
		}
		e = &entry{st: State{Tenant: tenant, Key: key, FirstSeen: seen, LastSeen: seen}}
		s.addLocked(sh, k, e, now)
	}
	if err == nil {
		e.pinChecked = now
	}
	if found && p.At.After(e.pinAt) && p.Endpoint != e.st.Endpoint {
		// Another gateway moved the pin, or removed it (no Endpoint): how
		// much of the prefix the new endpoint holds is for the router to
		// find out.
		e.st.Endpoint, e.st.PrefixBlocks, e.pinAt = p.Endpoint, 0, p.At
	}
	// Another gateway may have written it before the endpoint left.
	s.dropDepartedLocked(e)
	return e.st.Endpoint, e.st.PrefixBlocks
}

// Pin pins tenant's session key to endpointID, which holds prefixBlocks of
// its prompt, for reason. A session not seen yet is created. Only a change
// of endpoint is written to the PinStore and counted; the error is the
// PinStore's, and the pin holds in memory even then.
func (s *Store) Pin(ctx context.Context, tenant, key, endpointID string, prefixBlocks int, reason PinReason, now time.Time) error {
	k := skey{tenant, key}
	sh := s.shard(k)
	sh.mu.Lock()
	e, ok := sh.mu.sessions.Peek(k)
	if !ok || s.expired(e, now) {
		if ok {
			sh.mu.sessions.Remove(k)
			s.metrics.evictedTTL.Inc()
		}
		e = &entry{st: State{Tenant: tenant, Key: key, FirstSeen: now, LastSeen: now}}
		s.addLocked(sh, k, e, now)
	}
	// A pin to an endpoint that left and came back is a new pin, newer
	// than the departure.
	s.dropDepartedLocked(e)
	e.st.PrefixBlocks = prefixBlocks
	changed := e.st.Endpoint != endpointID
	e.st.Endpoint = endpointID
	if changed {
		e.pinAt = now
	}
	// Written here: as fresh as a read of the store.
	e.pinChecked = now
	sh.mu.Unlock()
	if !changed {
		return nil
	}
	s.metrics.pinChanges[reason].Inc()
	return s.persist(ctx, tenant, key, endpointID)
}

// Unpin removes the pin of tenant's session key at now, for reason; the
// session stays. It reports whether there was a pin.
func (s *Store) Unpin(ctx context.Context, tenant, key string, reason PinReason, now time.Time) (bool, error) {
	k := skey{tenant, key}
	sh := s.shard(k)
	sh.mu.Lock()
	e, ok := sh.mu.sessions.Peek(k)
	had := ok && e.st.Endpoint != ""
	if had {
		e.st.Endpoint, e.st.PrefixBlocks = "", 0
		// As fresh as the store, and later than the pin it replaces: a
		// look at the store before the unpin is written there does not
		// bring that pin back.
		e.pinAt, e.pinChecked = now, now
	}
	sh.mu.Unlock()
	if !had {
		return false, nil
	}
	s.metrics.pinChanges[reason].Inc()
	return true, s.persist(ctx, tenant, key, "")
}

// EndpointLeft drops, as of now, every pin to endpointID (a
// pools.Endpoint ID): the endpoint has left the fleet, and the sessions
// pinned to it re-pin at their next turn to where their prefix is best
// served. It costs the same for a million sessions as for one: it records
// the departure, and each session's pin is dropped (and counted, reason
// PinLeft) when it is next looked at. A pin set after now, to the endpoint
// come back, holds. Nothing is written to the PinStore: the re-pin is.
func (s *Store) EndpointLeft(endpointID string, now time.Time) {
	s.departedMu.Lock()
	defer s.departedMu.Unlock()
	m := map[string]time.Time{endpointID: now}
	if old := s.departed.Load(); old != nil {
		for id, at := range *old {
			// Every session seen since at has had its pin dropped
			// (Touch), and one not seen since expires by at+TTL: a
			// departure older than the TTL drops no pin any more.
			if id != endpointID && now.Sub(at) <= s.opts.TTL {
				m[id] = at
			}
		}
	}
	s.departed.Store(&m)
}

// dropDepartedLocked unpins e when its endpoint left at or after its pin
// was set. The caller holds e's shard lock.
func (s *Store) dropDepartedLocked(e *entry) {
	if e.st.Endpoint == "" {
		return
	}
	m := s.departed.Load()
	if m == nil {
		return
	}
	if at, ok := (*m)[e.st.Endpoint]; ok && !e.pinAt.After(at) {
		e.st.Endpoint, e.st.PrefixBlocks = "", 0
		s.metrics.pinChanges[PinLeft].Inc()
	}
}

func (s *Store) persist(ctx context.Context, tenant, key, endpointID string) error {
	if s.opts.Pins == nil {
		return nil
	}
	if err := s.opts.Pins.PutPin(ctx, tenant, key, endpointID); err != nil {
		s.metrics.pinStoreErrors.Inc()
		return fmt.Errorf("sessions: persisting pin: %w", err)
	}
	return nil
}

// forget removes a session's pin record from the PinStore: the session is
// gone.
func (s *Store) forget(ctx context.Context, tenant, key string) {
	if s.opts.Pins == nil {
		return
	}
	if err := s.opts.Pins.DeletePin(ctx, tenant, key); err != nil {
		s.metrics.pinStoreErrors.Inc()
	}
}

// LoadPins brings back the pins of the PinStore, as sessions last seen at
// now (or when the pin was written, if the store knows), skipping those
// older than the TTL. It returns how many it loaded. Call it at start-up,
// before routing.
func (s *Store) LoadPins(ctx context.Context, now time.Time) (int, error) {
	if s.opts.Pins == nil {
		return 0, nil
	}
	pins, err := s.opts.Pins.LoadPins(ctx)
	if err != nil {
		return 0, fmt.Errorf("sessions: loading pins: %w", err)
	}
	// Oldest first: each is pushed to the front of the LRU, so the list
	// keeps its order (the tail is the least recently seen).
	slices.SortStableFunc(pins, func(a, b Pin) int { return a.At.Compare(b.At) })
	n := 0
	for _, p := range pins {
		seen := now
		if !p.At.IsZero() {
			if now.Sub(p.At) > s.opts.TTL {
				// Collect it: a pin of a session long gone, perhaps one
				// forgotten for capacity, that no Sweep will meet again.
				s.forget(ctx, p.Tenant, p.Key)
				continue
			}
			seen = p.At
		}
		if p.Endpoint == "" {
			continue // unpinned: nothing to route by
		}
		k := skey{p.Tenant, p.Key}
		sh := s.shard(k)
		sh.mu.Lock()
		e, ok := sh.mu.sessions.Peek(k)
		if !ok {
			e = &entry{st: State{Tenant: p.Tenant, Key: p.Key, FirstSeen: seen, LastSeen: seen}}
			s.addLocked(sh, k, e, now)
		}
		e.st.Endpoint = p.Endpoint
		e.pinAt, e.pinChecked = p.At, now
		sh.mu.Unlock()
		n++
	}
	return n, nil
}

// Start brings back the pins of a previous run (LoadPins; a failure is
// logged, and the store starts without them) and starts the sweep that
// forgets expired sessions every minute, until Close. ctx bounds the
// loading. It is called once.
func (s *Store) Start(ctx context.Context) error {
	if s.swept != nil {
		return errors.New("sessions: store already started")
	}
	if n, err := s.LoadPins(ctx, time.Now()); err != nil {
		s.opts.Logger.Warn("session pins not restored", "err", err)
	} else if n > 0 {
		s.opts.Logger.Info("session pins restored", "pins", n)
	}
	s.swept = make(chan struct{})
	go s.sweep()
	return nil
}

func (s *Store) sweep() {
	defer close(s.swept)
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep(time.Now())
		}
	}
}

// Close stops the sweep and waits for it, up to ctx. The store still
// answers; it is no longer swept.
func (s *Store) Close(ctx context.Context) error {
	s.closed.Do(func() { close(s.stop) })
	if s.swept == nil {
		return nil
	}
	select {
	case <-s.swept:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sessions: close: %w", ctx.Err())
	}
}

// Sweep forgets every session expired at now, removes their pins from the
// PinStore, and returns how many it forgot. Touch forgets expired sessions
// as it meets them; Sweep is for a janitor.
func (s *Store) Sweep(now time.Time) int {
	n := 0
	var unpinned []skey
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		c := sh.mu.sessions
		for k, e, ok := c.Oldest(); ok && s.expired(e, now); k, e, ok = c.Oldest() {
			if e.st.Endpoint != "" || !e.pinAt.IsZero() {
				// Pinned, or pinned once and unpinned: the store
				// holds a record.
				unpinned = append(unpinned, k)
			}
			c.RemoveOldest()
			s.metrics.evictedTTL.Inc()
			n++
		}
		sh.mu.Unlock()
	}
	for _, k := range unpinned {
		s.forget(context.Background(), k.tenant, k.key)
	}
	return n
}

// Len is the number of sessions in memory, expired ones not yet swept
// included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.mu.sessions.Len()
		sh.mu.Unlock()
	}
	return n
}

// addLocked puts e, a session new to sh under k, in front, the most
// recently seen, after dropping the expired sessions; beyond capacity the
// least recently seen go.
func (s *Store) addLocked(sh *shard, k skey, e *entry, now time.Time) {
	s.expireLocked(sh, now)
	if n := sh.mu.sessions.Add(k, e); n > 0 {
		s.metrics.evictedCapacity.Add(float64(n))
	}
}

// expireLocked drops expired sessions from the least recently seen end.
// Touch moves a session to the front, so that end is always the oldest.
func (s *Store) expireLocked(sh *shard, now time.Time) {
	c := sh.mu.sessions
	for _, e, ok := c.Oldest(); ok && s.expired(e, now); _, e, ok = c.Oldest() {
		c.RemoveOldest()
		s.metrics.evictedTTL.Inc()
	}
}

// String describes the store for debugging.
func (s *Store) String() string {
	return fmt.Sprintf("sessions.Store{shards: %d, max: %d, ttl: %v, len: %d}", len(s.shards), s.opts.MaxSessions, s.opts.TTL, s.Len())
}
