package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrNotFound: no value under the key.
	ErrNotFound = errors.New("state: not found")
	// ErrClosed: the DB has been closed.
	ErrClosed = errors.New("state: closed")
)

// Namespace is one owner's part of the store: every key it reads or writes
// is under the owner's prefix, which the Namespace adds and strips, so an
// owner sees only its own keys, in byte order.
//
// Each method says how a Redis implementation would do it: keys as Redis
// strings under the namespace's prefix, and one sorted set per namespace,
// all scores 0, holding its keys so that they can be scanned in byte order
// (ZRANGEBYLEX), updated in the same MULTI as the strings.
type Namespace interface {
	// Get returns a copy of the value under key, or ErrNotFound.
	// Redis: GET.
	Get(ctx context.Context, key []byte) ([]byte, error)
	// Put stores value under key, replacing what was there, durably.
	// Redis: SET and ZADD in one MULTI.
	Put(ctx context.Context, key, value []byte) error
	// Delete removes key, durably; a missing key is not an error.
	// Redis: DEL and ZREM in one MULTI.
	Delete(ctx context.Context, key []byte) error
	// Scan calls fn for every key in r, in byte order (descending if
	// r.Reverse), on a consistent view: writes that commit during the scan
	// are not seen. The slices are valid only during the call, and fn must
	// not call into the DB (see the package doc). The first error fn
	// returns stops the scan and is returned as it is.
	// Redis: ZRANGEBYLEX (ZREVRANGEBYLEX) by pages, then MGET; a page is
	// consistent, the whole scan is only if a Lua script reads it at once.
	Scan(ctx context.Context, r Range, fn func(key, value []byte) error) error
	// Apply commits b whole or not at all; see Batch.Sync for when it is
	// durable. An empty batch is a no-op.
	// Redis: the batch's commands in one MULTI/EXEC, or in one Lua script
	// when it holds a DeletePrefix, which must list the keys it deletes.
	Apply(ctx context.Context, b *Batch) error
	// Lease takes or renews the lease called key for holder: it succeeds
	// when no one holds it, its holder's lease has run out, or holder
	// holds it already (a renewal); then holder holds it for ttl from
	// now. It reports whether holder holds it now. Two holders never hold
	// one lease at once, however they race. A lease is not a key of the
	// namespace: Get and Scan do not see it, and it lives only as long as
	// its ttl (in memory and Pebble, in this process: one process is the
	// only holder there is). ttl must be positive.
	// Redis: a Lua script of GET, then SET PX when free or holder's.
	Lease(ctx context.Context, key []byte, holder string, ttl time.Duration) (bool, error)
	// Renew extends holder's lease called key to ttl from now, only if
	// holder holds it still (it has not run out): unlike Lease it never
	// takes a free one, so a holder that paused past its ttl learns that
	// it lost the lease even when no one has taken it since. It reports
	// whether holder holds it now.
	// Redis: a Lua script of GET, then PEXPIRE when holder's.
	Renew(ctx context.Context, key []byte, holder string, ttl time.Duration) (bool, error)
	// Release ends holder's lease called key at once; a lease holder does
	// not hold (any more) is left as it is.
	// Redis: a Lua script of GET, then DEL when holder's.
	Release(ctx context.Context, key []byte, holder string) error
	// Draw takes each draw's cost from its budget, all at once, when
	// each has its draw's need left, or with force whatever they have (a
	// settlement); it writes each budget's state after (or now, when it
	// did not draw) into levels, len(draws) at least, and reports whether
	// it drew. Gateways drawing from one budget at once each see the
	// other's draw. Like a lease a budget is not a key: in memory and
	// Pebble it lives in this process (a restart forgets it).
	// Redis: a Lua script of HMGET, then HSET and PEXPIRE per budget.
	Draw(ctx context.Context, now time.Time, draws []Draw, force bool, levels []Level) (bool, error)
	// Health is the DB's (DB.Health): nil while the store answers, else
	// an error of class ErrUnavailable. An atomic load, for every request.
	Health() error
}

// Range is a span of keys of a namespace: [Start, End).
type Range struct {
	// Start is the first key in the range; nil means the namespace's first.
	Start []byte
	// End is the first key after the range; nil means past the
	// namespace's last.
	End []byte
	// Reverse scans from the last key down to Start.
	Reverse bool
}

// Prefix is the range of the keys that begin with p; Prefix(nil) is the
// whole namespace.
func Prefix(p []byte) Range { return Range{Start: p, End: prefixEnd(p)} }

// Batch is a set of writes applied together by Namespace.Apply, in the
// order they were added: a Put after a DeletePrefix that covers it
// survives it. The zero value is an empty, unsynced batch.
//
// A batch keeps the slices and Values it is given, without copying,
// until Apply returns: do not change them before.
type Batch struct {
	// Sync makes Apply return only once the batch is durable (it survives
	// a kill -9). Without it, the batch is durable once a later synced
	// write of the same DB has returned, or the DB has been closed.
	// Redis: durability is the server's (appendfsync); Sync adds a WAIT
	// for the replicas.
	Sync bool
	ops  []op
}

type opKind uint8

const (
	opPut opKind = iota
	opDelete
	opDeletePrefix
)

type op struct {
	kind       opKind
	key, value []byte
	// enc, when not nil, is the value of a put, written by the engine.
	enc Value
}

// Value is a value that the store writes itself, in place, into the
// buffer that carries the batch to it (Pebble's batch), rather than one
// encoded beforehand and copied there: a large value is held once at a
// time, not twice.
type Value interface {
	// Len is the exact length of the value, in bytes.
	Len() int
	// AppendTo appends the value, Len bytes, to b and returns the result.
	AppendTo(b []byte) []byte
}

// Put stores value under key.
func (b *Batch) Put(key, value []byte) { b.add(op{kind: opPut, key: key, value: value}) }

// PutValue stores v under key, written when Apply writes the batch.
func (b *Batch) PutValue(key []byte, v Value) { b.add(op{kind: opPut, key: key, enc: v}) }

// Delete removes key.
func (b *Batch) Delete(key []byte) { b.add(op{kind: opDelete, key: key}) }

// DeletePrefix removes every key that begins with prefix.
func (b *Batch) DeletePrefix(prefix []byte) { b.add(op{kind: opDeletePrefix, key: prefix}) }

func (b *Batch) add(o op) {
	if b.ops == nil {
		// A response's batch is a dozen writes: start there rather than
		// grow from one.
		b.ops = make([]op, 0, 8)
	}
	b.ops = append(b.ops, o)
}

// Len is the number of writes in the batch.
func (b *Batch) Len() int { return len(b.ops) }

// valueLen is the length of o's value.
func (o *op) valueLen() int {
	if o.enc != nil {
		return o.enc.Len()
	}
	return len(o.value)
}

// appendValue appends o's value to dst, which has room for it: a Value
// that writes other than its Len bytes, or past that room, is a bug of
// its own, and panics.
func (o *op) appendValue(dst []byte) []byte {
	if o.enc == nil {
		return append(dst, o.value...)
	}
	n, room := o.enc.Len(), cap(dst)-len(dst)
	out := o.enc.AppendTo(dst)
	if len(out) != len(dst)+n || n > room || cap(out) != cap(dst) {
		panic(fmt.Sprintf("state: a %T of length %d wrote %d bytes into room for %d", o.enc, n, len(out)-len(dst), room))
	}
	return out
}

// bytes is o's value in a slice of its own when it is a Value, else the
// slice o was given.
func (o *op) bytes() []byte {
	if o.enc == nil {
		return o.value
	}
	return o.appendValue(make([]byte, 0, o.enc.Len()))
}

// engine is the store under the namespaces. Every call names the
// namespace's prefix and keys relative to it: an embedded engine puts the
// prefix before the key, Redis makes a hash-tagged key of it. The DB holds
// its read lock around every call, so an engine never sees a call after
// close.
type engine interface {
	// get returns a copy of the value under prefix+key, or ErrNotFound.
	get(ctx context.Context, prefix, key []byte) ([]byte, error)
	// scan calls fn for the keys of the namespace in [lo, hi), lo < hi,
	// hi nil for the namespace's end, with the keys relative to prefix.
	scan(ctx context.Context, prefix, lo, hi []byte, reverse bool, fn func(key, value []byte) error) error
	// apply commits b under prefix.
	apply(ctx context.Context, prefix []byte, b *Batch) error
	// lease, renew and release are Namespace.Lease, Renew and Release
	// under prefix.
	lease(ctx context.Context, prefix, key []byte, holder string, ttl time.Duration, take bool) (bool, error)
	release(ctx context.Context, prefix, key []byte, holder string) error
	close() error
}

// flatEngine is an engine whose keys are whole, prefix and key together
// (Pebble, memory); flat adapts it to the engine's calls.
type flatEngine interface {
	// get returns a copy of the value under key, or ErrNotFound.
	get(key []byte) ([]byte, error)
	// scan calls fn for the keys in [lo, hi), hi never nil.
	scan(lo, hi []byte, reverse bool, fn func(key, value []byte) error) error
	// apply commits b with prefix before every key.
	apply(prefix []byte, b *Batch) error
	close() error
}

// flat adapts a flatEngine to engine. Its leases are in this process's
// memory: an embedded store has one process, so a mutex is the whole
// of the mutual exclusion, and a restart (every holder gone) frees them.
type flat struct {
	e       flatEngine
	leases  *leaseTable
	buckets *bucketTable
}

func newFlat(e flatEngine) flat {
	return flat{e: e, leases: &leaseTable{now: time.Now}, buckets: &bucketTable{}}
}

// leaseTable holds the leases of an embedded store.
type leaseTable struct {
	// now is the clock the leases are timed by.
	now func() time.Time
	mu  struct {
		sync.Mutex
		// protects the field below
		held map[string]heldLease // by prefix+key
	}
}

type heldLease struct {
	holder string
	until  time.Time
}

// lease takes (take) or renews holder's lease k.
func (l *leaseTable) lease(k, holder string, ttl time.Duration, take bool) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.mu.held[k]
	live := ok && now.Before(h.until)
	if live && h.holder != holder || !take && (!live || h.holder != holder) {
		return false
	}
	if l.mu.held == nil {
		l.mu.held = make(map[string]heldLease)
	}
	l.mu.held[k] = heldLease{holder: holder, until: now.Add(ttl)}
	// Leases that ran out are dropped as others are taken, so the table
	// holds about as many as are live.
	if len(l.mu.held)%64 == 0 {
		for k, h := range l.mu.held {
			if !now.Before(h.until) {
				delete(l.mu.held, k)
			}
		}
	}
	return true
}

func (l *leaseTable) release(k, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.mu.held[k]; ok && h.holder == holder {
		delete(l.mu.held, k)
	}
}

func (f flat) lease(_ context.Context, prefix, key []byte, holder string, ttl time.Duration, take bool) (bool, error) {
	return f.leases.lease(string(prefix)+string(key), holder, ttl, take), nil
}

func (f flat) release(_ context.Context, prefix, key []byte, holder string) error {
	f.leases.release(string(prefix)+string(key), holder)
	return nil
}

func (f flat) get(_ context.Context, prefix, key []byte) ([]byte, error) {
	return f.e.get(append(prefix[:len(prefix):len(prefix)], key...))
}

func (f flat) scan(_ context.Context, prefix, lo, hi []byte, reverse bool, fn func(key, value []byte) error) error {
	flo, fhi := append(prefix[:len(prefix):len(prefix)], lo...), prefixEnd(prefix)
	if hi != nil {
		fhi = append(prefix[:len(prefix):len(prefix)], hi...)
	}
	strip := len(prefix)
	return f.e.scan(flo, fhi, reverse, func(k, v []byte) error { return fn(k[strip:], v) })
}

func (f flat) apply(_ context.Context, prefix []byte, b *Batch) error { return f.e.apply(prefix, b) }

func (f flat) close() error { return f.e.close() }

// DB is an open store; Namespace hands out its parts. OpenPebble,
// OpenRedis and NewMemory make one.
type DB struct {
	eng engine
	// health is the outcome of the latest operation or probe.
	health health
	// stopProbe ends the probe of the store, if one runs (Redis), and
	// probing is done when it has ended.
	stopProbe context.CancelFunc
	probing   chan struct{}
	mu        struct {
		sync.RWMutex
		// protects the field below, and eng's life: every operation
		// holds mu shared, Close holds it exclusively
		closed bool
	}
	prefixes struct {
		sync.Mutex
		// protects the field below
		taken []string
	}
}

// newDB is the DB over eng; log (nil for slog.Default()) hears of the
// store going down and coming back.
func newDB(eng engine, log *slog.Logger) *DB {
	if log == nil {
		log = slog.Default()
	}
	db := &DB{eng: eng}
	db.health.log = log
	return db
}

// startProbe pings the store every interval, each ping bounded by
// timeout, until Close.
func (db *DB) startProbe(ping func(context.Context) error, interval, timeout time.Duration) {
	ctx, stop := context.WithCancel(context.Background())
	db.stopProbe, db.probing = stop, make(chan struct{})
	go func() {
		defer close(db.probing)
		db.health.probe(ctx, ping, interval, timeout)
	}()
}

// Health reports whether the store answered the latest operation to end
// (or, with Redis, the latest ping, one a second while no operation
// tells): nil, or an error of class ErrUnavailable naming the failure. It
// costs an atomic load, so a caller about to do work that must be stored
// asks it first, and refuses the work while the store is down.
func (db *DB) Health() error { return db.health.err() }

// Namespace returns the namespace of the keys under prefix. A prefix ends
// in '/', and no prefix handed out by a DB is a proper prefix of another,
// so no owner's keys run into another's; asking twice for one prefix
// gives the same keys. A prefix that breaks the rule is a bug of the
// caller's, and panics.
func (db *DB) Namespace(prefix string) Namespace {
	if !strings.HasSuffix(prefix, "/") {
		panic(fmt.Sprintf("state: namespace prefix %q does not end in '/'", prefix))
	}
	db.prefixes.Lock()
	defer db.prefixes.Unlock()
	for _, p := range db.prefixes.taken {
		if p != prefix && (strings.HasPrefix(p, prefix) || strings.HasPrefix(prefix, p)) {
			panic(fmt.Sprintf("state: namespace prefix %q overlaps %q", prefix, p))
		}
	}
	if !slices.Contains(db.prefixes.taken, prefix) {
		db.prefixes.taken = append(db.prefixes.taken, prefix)
	}
	return &namespace{db: db, prefix: []byte(prefix)}
}

// Collector is the store's metrics for a Prometheus registry, nil when it
// exports none (Pebble and memory export none today).
func (db *DB) Collector() prometheus.Collector {
	if c, ok := db.eng.(interface{ collector() prometheus.Collector }); ok {
		return c.collector()
	}
	return nil
}

// Close waits for the operations in flight and closes the store: unsynced
// batches are made durable. Operations after Close answer ErrClosed; a
// second Close does nothing.
func (db *DB) Close() error {
	if db.stopProbe != nil {
		db.stopProbe()
		<-db.probing
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.mu.closed {
		return nil
	}
	db.mu.closed = true
	return db.eng.close()
}

// enter starts an operation: it holds mu shared until leave, so Close
// cannot close the engine under it. On error, nothing is held.
// Operations never nest, so no one takes mu twice.
func (db *DB) enter(ctx context.Context) error {
	db.mu.RLock()
	if db.mu.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		db.mu.RUnlock()
		return err
	}
	return nil
}

// leave ends an operation begun by enter.
func (db *DB) leave() { db.mu.RUnlock() }

type namespace struct {
	db     *DB
	prefix []byte
}

func (n *namespace) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := n.db.enter(ctx); err != nil {
		return nil, err
	}
	defer n.db.leave()
	mark := n.db.health.begin()
	v, err := n.db.eng.get(ctx, n.prefix, key)
	return v, n.db.health.end(ctx, mark, err)
}

func (n *namespace) Put(ctx context.Context, key, value []byte) error {
	b := Batch{Sync: true, ops: []op{{kind: opPut, key: key, value: value}}}
	return n.Apply(ctx, &b)
}

func (n *namespace) Delete(ctx context.Context, key []byte) error {
	b := Batch{Sync: true, ops: []op{{kind: opDelete, key: key}}}
	return n.Apply(ctx, &b)
}

func (n *namespace) Scan(ctx context.Context, r Range, fn func(key, value []byte) error) error {
	if err := n.db.enter(ctx); err != nil {
		return err
	}
	defer n.db.leave()
	if r.End != nil && bytes.Compare(r.Start, r.End) >= 0 {
		return nil
	}
	// fn's error is the caller's, returned as it is; only the store's
	// own failures say anything of its health.
	var fnErr error
	mark := n.db.health.begin()
	err := n.db.eng.scan(ctx, n.prefix, r.Start, r.End, r.Reverse, func(k, v []byte) error {
		fnErr = fn(k, v)
		return fnErr
	})
	if err != nil && err == fnErr {
		return err
	}
	return n.db.health.end(ctx, mark, err)
}

func (n *namespace) Apply(ctx context.Context, b *Batch) error {
	if err := n.db.enter(ctx); err != nil {
		return err
	}
	defer n.db.leave()
	if len(b.ops) == 0 {
		return nil
	}
	mark := n.db.health.begin()
	return n.db.health.end(ctx, mark, n.db.eng.apply(ctx, n.prefix, b))
}

// prefixEnd is the first key after every key that begins with p, nil if
// there is none (p is empty or all 0xff).
func prefixEnd(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] < 0xff {
			end := slices.Clone(p[:i+1])
			end[i]++
			return end
		}
	}
	return nil
}

func (n *namespace) Lease(ctx context.Context, key []byte, holder string, ttl time.Duration) (bool, error) {
	return n.lease(ctx, key, holder, ttl, true)
}

func (n *namespace) Renew(ctx context.Context, key []byte, holder string, ttl time.Duration) (bool, error) {
	return n.lease(ctx, key, holder, ttl, false)
}

func (n *namespace) lease(ctx context.Context, key []byte, holder string, ttl time.Duration, take bool) (bool, error) {
	if ttl <= 0 {
		panic(fmt.Sprintf("state: lease of %q for %v", key, ttl))
	}
	if err := n.db.enter(ctx); err != nil {
		return false, err
	}
	defer n.db.leave()
	mark := n.db.health.begin()
	ok, err := n.db.eng.lease(ctx, n.prefix, key, holder, ttl, take)
	return ok, n.db.health.end(ctx, mark, err)
}

func (n *namespace) Release(ctx context.Context, key []byte, holder string) error {
	if err := n.db.enter(ctx); err != nil {
		return err
	}
	defer n.db.leave()
	mark := n.db.health.begin()
	return n.db.health.end(ctx, mark, n.db.eng.release(ctx, n.prefix, key, holder))
}

func (n *namespace) Health() error { return n.db.Health() }

var _ Namespace = (*namespace)(nil)
