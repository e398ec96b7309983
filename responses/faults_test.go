package responses

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
)

// faultyNamespace is a state.Namespace with the faults and probes a test
// sets, under a StateStore: the store's own code runs over it unchanged.
// With no field set, every call passes through.
type faultyNamespace struct {
	state.Namespace

	// down makes Health answer errOutage, as the state store's probe does
	// while the store is down.
	down atomic.Bool
	// syncErr, when set, is the answer of every synced Apply, which then
	// writes nothing: a disk that filled, a store that went down. Only
	// the writes that end or keep a response are synced; events are not.
	syncErr atomic.Pointer[error]
	// afterSync, when set, is called after each synced Apply that
	// succeeded, with its context.
	afterSync atomic.Pointer[func(context.Context)]
	// stalled, when not nil, holds every lease renewal until it is
	// closed, as a gateway that stopped answering.
	stalled chan struct{}

	// syncs counts the synced Applies begun; jobScans, the scans for
	// pending background responses (each StateStore.PendingJobs);
	// renewals, the lease renewals begun.
	syncs, jobScans, renewals atomic.Int32
}

// faulty wraps ns.
func faulty(ns state.Namespace) *faultyNamespace { return &faultyNamespace{Namespace: ns} }

// failSyncs makes every synced Apply answer err; nil heals the store.
func (n *faultyNamespace) failSyncs(err error) {
	if err == nil {
		n.syncErr.Store(nil)
		return
	}
	n.syncErr.Store(&err)
}

func (n *faultyNamespace) Health() error {
	if n.down.Load() {
		return errOutage
	}
	return n.Namespace.Health()
}

func (n *faultyNamespace) Apply(ctx context.Context, b *state.Batch) error {
	if !b.Sync {
		return n.Namespace.Apply(ctx, b)
	}
	n.syncs.Add(1)
	if err := n.syncErr.Load(); err != nil {
		return *err
	}
	if err := n.Namespace.Apply(ctx, b); err != nil {
		return err
	}
	if fn := n.afterSync.Load(); fn != nil {
		(*fn)(ctx)
	}
	return nil
}

func (n *faultyNamespace) Scan(ctx context.Context, r state.Range, fn func(k, v []byte) error) error {
	if string(r.Start) == pfxJob {
		n.jobScans.Add(1)
	}
	return n.Namespace.Scan(ctx, r, fn)
}

func (n *faultyNamespace) Renew(ctx context.Context, key []byte, holder string, ttl time.Duration) (bool, error) {
	n.renewals.Add(1)
	if n.stalled != nil {
		select {
		case <-n.stalled:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return n.Namespace.Renew(ctx, key, holder, ttl)
}

var _ state.Namespace = (*faultyNamespace)(nil)
