package sessions

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Pin is a session's pinned endpoint as a PinStore keeps it.
type Pin struct {
	Tenant, Key string
	// Endpoint is the pools.Endpoint ID.
	Endpoint string
	// At is when the pin was written; zero when the store does not know.
	// LoadPins skips pins older than the TTL.
	At time.Time
}

// PinStore persists pins so that they survive a restart. The durable state
// store implements it; MemPinStore is the in-memory one. Implementations
// must be safe for concurrent use.
type PinStore interface {
	// PutPin records that tenant's session key is pinned to endpointID;
	// an empty endpointID records that it was unpinned, with the time, so
	// that other gateways reading the pin drop theirs.
	PutPin(ctx context.Context, tenant, key, endpointID string) error
	// DeletePin forgets the session's pin record altogether: the session
	// is gone.
	DeletePin(ctx context.Context, tenant, key string) error
	// LoadPins returns every pin record, unpins (no Endpoint) included,
	// in any order.
	LoadPins(ctx context.Context) ([]Pin, error)
	// GetPin returns tenant's session key's pin record (an unpin has no
	// Endpoint), and false when it has none: what Store reads when
	// Options.PinRefresh asks it to look at pins other gateways wrote.
	GetPin(ctx context.Context, tenant, key string) (Pin, bool, error)
}

// PinReason says why a pin was set, moved or removed.
type PinReason uint8

const (
	// PinNew: the session's first pin.
	PinNew PinReason = iota
	// PinUnhealthy: the pinned endpoint failed its health check.
	PinUnhealthy
	// PinDraining: the pinned endpoint is draining.
	PinDraining
	// PinBreakerOpen: the pinned endpoint's circuit breaker is open.
	PinBreakerOpen
	// PinOverloaded: the load guard spilled the session off its endpoint.
	PinOverloaded
	// PinUnavailable: the pinned endpoint is not among the candidates (it
	// left the fleet, or no longer serves the model).
	PinUnavailable
	// PinRescored: the scorers preferred another endpoint, e.g. one that
	// now holds a longer prefix.
	PinRescored
	// PinRemoved: the pin was removed on request (admin unpin).
	PinRemoved
	// PinLeft: the pinned endpoint left the fleet (Store.EndpointLeft);
	// the session re-pins, as new, at its next turn.
	PinLeft
	// PinHandOff: the pinned endpoint started to drain and the session was
	// handed over, before its next turn, to the endpoint that will serve
	// that turn best.
	PinHandOff

	numPinReasons = iota
)

var pinReasonNames = [numPinReasons]string{"new", "unhealthy", "draining", "breaker-open", "overloaded", "unavailable", "rescored", "removed", "left", "hand-off"}

func (r PinReason) String() string {
	if int(r) < len(pinReasonNames) {
		return pinReasonNames[r]
	}
	return "pin-reason(" + strconv.Itoa(int(r)) + ")"
}

// MemPinStore is a PinStore in memory, for tests and for a gateway without
// durable state. The zero value is ready to use.
type MemPinStore struct {
	// Clock stamps Pin.At; nil leaves it zero, so no pin is ever too old.
	Clock func() time.Time

	mu struct {
		sync.Mutex
		// protects the fields below
		pins map[[2]string]Pin
	}
}

// PutPin implements PinStore.
func (m *MemPinStore) PutPin(_ context.Context, tenant, key, endpointID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{tenant, key}
	if m.mu.pins == nil {
		m.mu.pins = make(map[[2]string]Pin)
	}
	p := Pin{Tenant: tenant, Key: key, Endpoint: endpointID}
	if m.Clock != nil {
		p.At = m.Clock()
	}
	m.mu.pins[k] = p
	return nil
}

// DeletePin implements PinStore.
func (m *MemPinStore) DeletePin(_ context.Context, tenant, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mu.pins, [2]string{tenant, key})
	return nil
}

// GetPin implements PinStore.
func (m *MemPinStore) GetPin(_ context.Context, tenant, key string) (Pin, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.mu.pins[[2]string{tenant, key}]
	return p, ok, nil
}

// LoadPins implements PinStore. The pins come sorted by tenant and key.
func (m *MemPinStore) LoadPins(context.Context) ([]Pin, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Pin, 0, len(m.mu.pins))
	for _, p := range m.mu.pins {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pin) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
	})
	return out, nil
}

var _ PinStore = (*MemPinStore)(nil)
