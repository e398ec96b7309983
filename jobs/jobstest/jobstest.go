// Package jobstest holds what tests of leased work share: a clock the test
// moves, and a namespace whose leases run on it, so that a lease runs out
// when the test moves the clock past it, never because a loaded machine
// ran a renewal late.
package jobstest

import (
	"context"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// Clock is a clock (a jobs.Clock) that stands still until Advance.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	c  chan time.Time
}

// NewClock is a clock that reads a fixed instant until Advance.
func NewClock() *Clock { return &Clock{now: time.Unix(1<<30, 0)} }

// Now implements jobs.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After implements jobs.Clock: the channel receives once Advance has
// moved the clock d on.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	return ch
}

// Advance moves the clock on by d and wakes the waits that are due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.c <- c.now
	}
	c.waiters = kept
}

// Waiters is the number of waits not yet due, given up ones included.
func (c *Clock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// Leases is a state.Namespace whose leases (Lease, Renew, Release) are
// held on Clock, with the state store's rules: a lease is live until its
// ttl has passed, taken by anyone once it is not, renewed only by its
// holder while it is. Every other call goes to the Namespace.
type Leases struct {
	state.Namespace
	Clock *Clock

	mu   sync.Mutex
	held map[string]lease
	// fail, when set, is every lease call's answer: a store down.
	fail error
}

// Fail makes every lease call answer err, as a store that is down; nil
// brings it back.
func (l *Leases) Fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail = err
}

type lease struct {
	holder string
	until  time.Time
}

// NewLeases is ns with its leases on clock.
func NewLeases(ns state.Namespace, clock *Clock) *Leases {
	return &Leases{Namespace: ns, Clock: clock, held: make(map[string]lease)}
}

func (l *Leases) lease(key []byte, holder string, ttl time.Duration, take bool) (bool, error) {
	now := l.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return false, l.fail
	}
	h, ok := l.held[string(key)]
	live := ok && now.Before(h.until)
	if live && h.holder != holder || !take && !live {
		return false, nil
	}
	l.held[string(key)] = lease{holder, now.Add(ttl)}
	return true, nil
}

// Lease implements state.Namespace on the clock.
func (l *Leases) Lease(_ context.Context, key []byte, holder string, ttl time.Duration) (bool, error) {
	return l.lease(key, holder, ttl, true)
}

// Renew implements state.Namespace on the clock.
func (l *Leases) Renew(_ context.Context, key []byte, holder string, ttl time.Duration) (bool, error) {
	return l.lease(key, holder, ttl, false)
}

// Release implements state.Namespace.
func (l *Leases) Release(_ context.Context, key []byte, holder string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	if l.held[string(key)].holder == holder {
		delete(l.held, string(key))
	}
	return nil
}

// Holder is who holds the lease called key now, "" for no one, and for
// how long still.
func (l *Leases) Holder(key string) (string, time.Duration) {
	now := l.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.held[key]
	if !ok || !now.Before(h.until) {
		return "", 0
	}
	return h.holder, h.until.Sub(now)
}

// RenewedNow reports whether holder holds the lease called key for a
// whole ttl from the clock's present reading: it took or renewed it since
// the last Advance.
func (l *Leases) RenewedNow(key, holder string, ttl time.Duration) bool {
	h, left := l.Holder(key)
	return h == holder && left == ttl
}

var _ state.Namespace = (*Leases)(nil)
