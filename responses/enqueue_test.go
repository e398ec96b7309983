package responses

import (
	"context"
	"sync"
	"testing"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// TestBackgroundOwnScanWhileEnqueuing: a gateway's own scan for pending
// responses, run while it is storing a new background response it has
// claimed, does not take it over and run it a second time (its claim
// would be granted: the holder is the same).
func TestBackgroundOwnScanWhileEnqueuing(t *testing.T) {
	eng := &fakeEngine{}
	ns := faulty(openStore(t, t.TempDir()).Namespace())
	svc := startOn(t, NewStore(ns, StoreOptions{}), eng, shortLease)
	// The first synced write from here on is the new response stored as
	// pending: svc's own scan runs right after it, in the window between
	// that write and the job's registration.
	var once sync.Once
	var scanErr error
	scan := func(ctx context.Context) { once.Do(func() { scanErr = svc.takeOver(ctx) }) }
	ns.afterSync.Store(&scan)
	resp := createBackground(t, svc, "a", "once")
	if got := waitStatus(t, svc, resp.ID); got.Status != wire.StatusCompleted {
		t.Fatalf("status %s", got.Status)
	}
	if scanErr != nil {
		t.Fatal(scanErr)
	}
	if n := len(eng.requests()); n != 1 {
		t.Errorf("%d engine requests, want 1: the gateway ran its own new response twice", n)
	}
}
