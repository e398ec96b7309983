package jobs

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Clock is the time a Queue reads and waits on: the wall clock in
// production (nil means Wall), a clock the test moves in tests
// (jobstest.Clock), so that no test waits for time to pass.
type Clock interface {
	Now() time.Time
	// After sends the time on the channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Wall is the wall clock.
var Wall Clock = wall{}

type wall struct{}

func (wall) Now() time.Time                         { return time.Now() }
func (wall) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Sleep waits d on c; false if ctx ends first.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	select {
	case <-c.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// every calls fn every d on c until ctx ends, on the caller's goroutine.
func every(ctx context.Context, c Clock, d time.Duration, fn func()) {
	for Sleep(ctx, c, d) {
		fn()
	}
}

// Backoff is the wait before work that failed is tried again: First,
// doubled at each retry up to Max, less up to a quarter at random, so that
// work that failed together does not all come back at the same instant.
type Backoff struct {
	First, Max time.Duration
}

// Delay is the wait before the n-th retry, n from 1.
func (b Backoff) Delay(n int) time.Duration {
	d := b.First
	for k := 1; k < n && d < b.Max; k++ {
		d *= 2
	}
	d = min(d, b.Max)
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// ErrGaveUp is Retry.Wait's answer once the work has been refused for
// longer than Retry.For.
var ErrGaveUp = errors.New("jobs: refused for longer than the retries last")

// Retry paces the attempts of one piece of work that the fleet refuses
// for a while ("try again later": a shed, with the wait it asks) or fails.
// Its zero value retries at once, for ever; set Clock and Backoff.
type Retry struct {
	// Clock is what Wait waits on; nil means Wall.
	Clock Clock
	// Backoff is the wait when the refusal asks none, or asks less.
	Backoff Backoff
	// MaxWait caps one wait, whatever the refusal asks; zero: no cap.
	MaxWait time.Duration
	// For bounds how long the work is retried, counted from the first
	// Wait; zero: for as long as the context lasts; negative: never.
	For time.Duration

	first time.Time
}

// Wait waits before the n-th retry (n from 1): at least asked (a
// refusal's Retry-After) plus up to a quarter of it at random, and at
// least Backoff.Delay(n); at most MaxWait and what is left of For. It
// answers ErrGaveUp, without waiting, once For has passed, and ctx's
// error when ctx ends first.
func (r *Retry) Wait(ctx context.Context, n int, asked time.Duration) error {
	c := r.Clock
	if c == nil {
		c = Wall
	}
	if r.first.IsZero() {
		r.first = c.Now()
	}
	asked = max(asked, 0)
	wait := max(asked+rand.N(asked/4+1), r.Backoff.Delay(n))
	if r.MaxWait > 0 {
		wait = min(wait, r.MaxWait)
	}
	if r.For != 0 {
		left := r.For - c.Now().Sub(r.first)
		if left <= 0 {
			return ErrGaveUp
		}
		wait = min(wait, left)
	}
	if !Sleep(ctx, c, wait) {
		return ctx.Err()
	}
	return nil
}
