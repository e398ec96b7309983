package turns

import (
	"sync"
	"time"
)

// fakeCapacity is a Capacity a test sets by hand.
type fakeCapacity struct {
	name string
	mu   sync.Mutex
	m    Measurement
}

func newFakeCapacity(name string, endpoints, slots int, saturation float64) *fakeCapacity {
	f := &fakeCapacity{name: name}
	f.set(Measurement{Endpoints: endpoints, Slots: slots, Saturation: saturation})
	return f
}

func (f *fakeCapacity) Name() string { return f.name }

func (f *fakeCapacity) Measure(time.Time, *FlowControl) Measurement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m
}

// set states m; a saturation below 1 is an open pool with unbounded room,
// a saturation of 1 a pool whose every endpoint is saturated.
func (f *fakeCapacity) set(m Measurement) {
	m.Room, m.QueueRoom = -1, -1
	if m.Saturation < 1 {
		m.Open = m.Endpoints
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m = m
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var _ Capacity = (*fakeCapacity)(nil)
