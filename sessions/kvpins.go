package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// KVPinStore keeps pins in a durable namespace of the state store, one
// key per session: "pin/<tenant>\x00<key>" → {"endpoint","at"}; an unpin
// is a record with no endpoint, kept until the session's TTL has passed
// so that every gateway sees it.
type KVPinStore struct {
	Namespace state.Namespace
	// Clock stamps pins; nil means time.Now.
	Clock func() time.Time
}

const pinPrefix = "pin/"

type storedPin struct {
	Endpoint string    `json:"endpoint"`
	At       time.Time `json:"at"`
}

func pinKey(tenant, key string) []byte {
	return []byte(pinPrefix + tenant + "\x00" + key)
}

// PutPin implements PinStore.
func (s *KVPinStore) PutPin(ctx context.Context, tenant, key, endpointID string) error {
	now := time.Now
	if s.Clock != nil {
		now = s.Clock
	}
	b, err := json.Marshal(storedPin{Endpoint: endpointID, At: now()})
	if err != nil {
		return err
	}
	return s.Namespace.Put(ctx, pinKey(tenant, key), b)
}

// DeletePin implements PinStore.
func (s *KVPinStore) DeletePin(ctx context.Context, tenant, key string) error {
	return s.Namespace.Delete(ctx, pinKey(tenant, key))
}

// LoadPins implements PinStore. Records it cannot read are skipped: a pin
// is a routing hint, and losing one costs one cold prefill.
func (s *KVPinStore) LoadPins(ctx context.Context) ([]Pin, error) {
	var pins []Pin
	err := s.Namespace.Scan(ctx, state.Prefix([]byte(pinPrefix)), func(k, v []byte) error {
		tenant, key, ok := strings.Cut(string(k[len(pinPrefix):]), "\x00")
		var sp storedPin
		if !ok || json.Unmarshal(v, &sp) != nil {
			return nil
		}
		pins = append(pins, Pin{Tenant: tenant, Key: key, Endpoint: sp.Endpoint, At: sp.At})
		return nil
	})
	return pins, err
}

// GetPin implements PinStore: one read.
func (s *KVPinStore) GetPin(ctx context.Context, tenant, key string) (Pin, bool, error) {
	v, err := s.Namespace.Get(ctx, pinKey(tenant, key))
	if errors.Is(err, state.ErrNotFound) {
		return Pin{}, false, nil
	}
	if err != nil {
		return Pin{}, false, err
	}
	var sp storedPin
	if json.Unmarshal(v, &sp) != nil {
		return Pin{}, false, nil
	}
	return Pin{Tenant: tenant, Key: key, Endpoint: sp.Endpoint, At: sp.At}, true, nil
}

var _ PinStore = (*KVPinStore)(nil)

// DefaultPinQueue is how many pin writes AsyncPinStore holds before it
// refuses more.
const DefaultPinQueue = 4096

// errPinQueueFull is returned when pin writes arrive faster than the
// store takes them; the pin holds in memory, and a restart may lose it.
var errPinQueueFull = errors.New("sessions: pin write queue full")

var errPinStoreClosed = errors.New("sessions: pin store closed")

// pinWrite is a queued PutPin, or DeletePin when delete is set.
type pinWrite struct {
	Pin
	delete bool
}

// AsyncPinStore writes pins to another PinStore from a goroutine of its
// own, so that a durable (synced) write never sits on the routing path: a
// pin is a routing hint, and losing the last few in a crash costs a cold
// prefill each. Close flushes what is queued.
type AsyncPinStore struct {
	inner PinStore
	queue chan pinWrite
	done  chan struct{}
	// onError, if set, hears every failed write.
	onError func(error)
	started sync.Once

	mu struct {
		sync.RWMutex
		// protects the field below; a write after Close is refused
		closed bool
	}
}

// NewAsyncPinStore builds the writer for inner, holding up to queue
// writes (DefaultPinQueue if queue <= 0). Writes queue from the start;
// Start begins writing them.
func NewAsyncPinStore(inner PinStore, queue int, onError func(error)) *AsyncPinStore {
	if queue <= 0 {
		queue = DefaultPinQueue
	}
	return &AsyncPinStore{inner: inner, queue: make(chan pinWrite, queue), done: make(chan struct{}), onError: onError}
}

// Start starts the writer goroutine, which runs until Close. Calls after
// the first do nothing.
func (a *AsyncPinStore) Start(context.Context) error {
	a.started.Do(func() { go a.run() })
	return nil
}

func (a *AsyncPinStore) run() {
	defer close(a.done)
	ctx := context.Background()
	for w := range a.queue {
		var err error
		if w.delete {
			err = a.inner.DeletePin(ctx, w.Tenant, w.Key)
		} else {
			err = a.inner.PutPin(ctx, w.Tenant, w.Key, w.Endpoint)
		}
		if err != nil && a.onError != nil {
			a.onError(err)
		}
	}
}

// PutPin implements PinStore: it queues the write and returns at once.
func (a *AsyncPinStore) PutPin(_ context.Context, tenant, key, endpointID string) error {
	return a.enqueue(pinWrite{Pin: Pin{Tenant: tenant, Key: key, Endpoint: endpointID}})
}

// DeletePin implements PinStore: it queues the removal and returns at
// once.
func (a *AsyncPinStore) DeletePin(_ context.Context, tenant, key string) error {
	return a.enqueue(pinWrite{Pin: Pin{Tenant: tenant, Key: key}, delete: true})
}

func (a *AsyncPinStore) enqueue(w pinWrite) error {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.mu.closed {
		return errPinStoreClosed
	}
	select {
	case a.queue <- w:
		return nil
	default:
		return errPinQueueFull
	}
}

// GetPin implements PinStore, reading the inner store (the writes still
// queued here are not seen).
func (a *AsyncPinStore) GetPin(ctx context.Context, tenant, key string) (Pin, bool, error) {
	return a.inner.GetPin(ctx, tenant, key)
}

// LoadPins implements PinStore, reading the inner store.
func (a *AsyncPinStore) LoadPins(ctx context.Context) ([]Pin, error) { return a.inner.LoadPins(ctx) }

// Close writes the queued pins and stops the writer, waiting for it up to
// ctx; later writes are refused.
func (a *AsyncPinStore) Close(ctx context.Context) error {
	a.mu.Lock()
	if !a.mu.closed {
		a.mu.closed = true
		close(a.queue)
	}
	a.mu.Unlock()
	a.Start(ctx) // never started: write what is queued now
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sessions: pin writer: close: %w", ctx.Err())
	}
}

var _ PinStore = (*AsyncPinStore)(nil)
