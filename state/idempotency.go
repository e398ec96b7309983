package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Records is a keyspace of values that expire by themselves: what is kept
// for a bounded time, then forgotten with nothing to sweep, such as the
// answers a gateway keeps for its clients' idempotency keys. It is not a
// Namespace: its keys are never scanned, and a value is written only where
// none is (Create) or in place of the one the writer read (Swap, a
// compare-and-swap), so that the processes sharing a store agree on which
// one of them writes a key.
//
// Redis: a string <KeyPrefix>rec/<name>/<key> with an expiry (PX); Create
// is SET NX PX, Swap a Lua script of GET then SET PX or DEL. On Pebble and
// memory the records live in this process's memory, the one process that
// uses the store: a restart forgets them.
type Records struct {
	db *DB
	// redis is the store's Redis; nil on an embedded store, whose
	// records are in local.
	redis *redisEngine
	key   string // the Redis keys' prefix
	local *recordTable
}

// Records returns the keyspace called name. Call it once per name: on an
// embedded store each call has a table of its own.
func (db *DB) Records(name string) *Records {
	r := &Records{db: db}
	if e, ok := db.eng.(*redisEngine); ok {
		r.redis, r.key = e, e.opts.KeyPrefix+"rec/"+name+"/"
	} else {
		r.local = &recordTable{now: time.Now}
	}
	return r
}

// Get returns a copy of the value under key, or ErrNotFound when there is
// none or it has expired.
func (r *Records) Get(ctx context.Context, key []byte) ([]byte, error) {
	var v []byte
	err := r.do(ctx, func() (err error) {
		if r.redis == nil {
			v, err = r.local.get(string(key))
			return err
		}
		v, err = r.redis.client.Get(ctx, r.key+string(key)).Bytes()
		if errors.Is(err, redis.Nil) {
			return ErrNotFound
		}
		return err
	})
	return v, err
}

// Create stores value under key for ttl, only when key has no value (or
// its value has expired). It reports whether it stored it.
func (r *Records) Create(ctx context.Context, key, value []byte, ttl time.Duration) (bool, error) {
	var ok bool
	err := r.do(ctx, func() (err error) {
		if r.redis == nil {
			ok = r.local.swap(string(key), nil, value, ttl)
			return nil
		}
		ok, err = r.redis.client.SetNX(ctx, r.key+string(key), value, max(ttl, time.Millisecond)).Result()
		return err
	})
	return ok, err
}

// Swap replaces key's value with value, for ttl from now, only when the
// value under key is old still (the bytes equal); a nil value deletes it.
// It reports whether it swapped.
func (r *Records) Swap(ctx context.Context, key, old, value []byte, ttl time.Duration) (bool, error) {
	var ok bool
	err := r.do(ctx, func() error {
		if r.redis == nil {
			ok = r.local.swap(string(key), old, value, ttl)
			return nil
		}
		n, err := swapRecord.Run(ctx, r.redis.client, []string{r.key + string(key)}, old, value, max(ttl.Milliseconds(), 1), value == nil).Int()
		ok = n == 1
		return err
	})
	return ok, err
}

// swapRecord sets KEYS[1] to ARGV[2] with expiry ARGV[3] ms, or deletes it
// when ARGV[4] is 1, if it holds ARGV[1]; it returns 1 when it did.
var swapRecord = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[4] == '1' then redis.call('DEL', KEYS[1])
else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
return 1
`)

// do runs op as one operation of the store: refused once it is closed,
// and its outcome told to the store's health.
func (r *Records) do(ctx context.Context, op func() error) error {
	if err := r.db.enter(ctx); err != nil {
		return err
	}
	defer r.db.leave()
	mark := r.db.health.begin()
	err := op()
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("state: records: %w", err)
	}
	return r.db.health.end(ctx, mark, err)
}

// recordTable holds the records of an embedded store.
type recordTable struct {
	// now is the clock the records expire by.
	now func() time.Time
	mu  struct {
		sync.Mutex
		// protects the field below
		held map[string]heldRecord
		// writes counts the writes since expired records were dropped.
		writes int
	}
}

type heldRecord struct {
	value []byte
	until time.Time
}

func (t *recordTable) get(k string) ([]byte, error) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.mu.held[k]
	if !ok || !now.Before(h.until) {
		return nil, ErrNotFound
	}
	return bytes.Clone(h.value), nil
}

// swap writes value (nil: deletes) under k for ttl when k's live value is
// old, or when it has none and old is nil.
func (t *recordTable) swap(k string, old, value []byte, ttl time.Duration) bool {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.mu.held[k]
	live := ok && now.Before(h.until)
	if live != (old != nil) || live && !bytes.Equal(h.value, old) {
		return false
	}
	if value == nil {
		delete(t.mu.held, k)
		return true
	}
	if t.mu.held == nil {
		t.mu.held = make(map[string]heldRecord)
	}
	t.mu.held[k] = heldRecord{value: bytes.Clone(value), until: now.Add(ttl)}
	// Expired records are dropped as others are written, so the table
	// holds about as many as are live.
	if t.mu.writes++; t.mu.writes >= max(64, len(t.mu.held)) {
		t.mu.writes = 0
		for k, h := range t.mu.held {
			if !now.Before(h.until) {
				delete(t.mu.held, k)
			}
		}
	}
	return true
}
