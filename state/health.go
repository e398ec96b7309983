package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// ErrUnavailable: the store did not carry out an operation. Redis could
// not be reached, did not answer in time, or refused (loading, out of
// memory, too few replicas acknowledged a synced write); the disk refused
// a write. It says nothing of the keys: the same operation may succeed
// once the store is back, which DB.Health tells. A write that fails with
// it may or may not have been applied.
var ErrUnavailable = errors.New("state: unavailable")

// health is what a DB knows of its store: whether the last operation to
// end, or the last probe, was answered. Reading it is an atomic load;
// keeping it costs an operation that succeeds two atomic loads, so every
// request may ask it.
//
// A failure takes the store down; a success brings it back only when the
// operation began after the failure that took it down, so an operation
// that was answered before an outage cannot hide it.
type health struct {
	// down is the number of the failure that took the store down, 0
	// while it answers.
	down atomic.Uint64
	// failures numbers the failures, from 1.
	failures atomic.Uint64
	// cause is the latest failure; set before down.
	cause atomic.Pointer[error]
	// answered is set by an operation that succeeds and cleared by the
	// probe, which skips its ping while operations tell it the store
	// answers.
	answered atomic.Bool
	log      *slog.Logger
}

// begin marks the start of an operation; end takes the mark.
func (h *health) begin() uint64 { return h.down.Load() }

// end records the outcome of an operation begun at mark and returns its
// error: a failure of the store's wrapped in ErrUnavailable, anything
// else as it is. A caller that has given up (ctx ended) learns nothing of
// the store.
func (h *health) end(ctx context.Context, mark uint64, err error) error {
	if err == nil || errors.Is(err, ErrNotFound) {
		h.ok(mark)
		return err
	}
	if ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return err
	}
	return h.fail(err)
}

func (h *health) ok(mark uint64) {
	if !h.answered.Load() {
		h.answered.Store(true)
	}
	if mark != 0 && h.down.CompareAndSwap(mark, 0) {
		h.log.Info("state: the store answers again")
	}
}

func (h *health) fail(err error) error {
	n := h.failures.Add(1)
	h.cause.Store(&err)
	if h.down.Swap(n) == 0 {
		h.log.Warn("state: the store is unavailable", "err", err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// err is nil while the store answers, else the failure that says why not.
func (h *health) err() error {
	if h.down.Load() == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, *h.cause.Load())
}

// probe checks the store every interval until ctx ends, so that the DB
// learns of an outage with no operation to tell it, and of the store's
// return while the gateway sends it nothing (it refuses what would write).
func (h *health) probe(ctx context.Context, ping func(context.Context) error, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.check(ctx, ping, timeout)
	}
}

// check pings the store, within timeout, and records the outcome; it
// skips the ping when the store is up and an operation has been answered
// since the last check, so a busy store is never pinged.
func (h *health) check(ctx context.Context, ping func(context.Context) error, timeout time.Duration) {
	if h.down.Load() == 0 && h.answered.Swap(false) {
		return
	}
	mark := h.begin()
	pctx, cancel := context.WithTimeout(ctx, timeout)
	err := ping(pctx)
	cancel()
	h.end(ctx, mark, err)
	// The ping's own answer is not an operation's.
	h.answered.Store(false)
}
