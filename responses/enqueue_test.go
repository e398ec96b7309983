package responses

import (
	"context"
	"sync"
	"testing"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// scanOnPut is a Store that runs svc's own scan for pending responses
// right after a new background response is stored as pending: in the
// window between that write and the job's registration.
type scanOnPut struct {
	Store
	svc  *Service
	once sync.Once
	err  error
}

func (w *scanOnPut) PutResponse(ctx context.Context, rec *Record, sync bool) error {
	err := w.Store.PutResponse(ctx, rec, sync)
	if err == nil && rec.Job != nil && w.svc != nil {
		w.once.Do(func() { w.err = w.svc.takeOver(ctx) })
	}
	return err
}

// TestBackgroundOwnScanWhileEnqueuing: a gateway's own scan for pending
// responses, run while it is storing a new background response it has
// claimed, does not take it over and run it a second time (its claim
// would be granted: the holder is the same).
func TestBackgroundOwnScanWhileEnqueuing(t *testing.T) {
	eng := &fakeEngine{}
	w := &scanOnPut{Store: openStore(t, t.TempDir())}
	svc := startOn(t, w, eng, shortLease)
	w.svc = svc
	resp := createBackground(t, svc, "a", "once")
	if got := waitStatus(t, svc, resp.ID); got.Status != wire.StatusCompleted {
		t.Fatalf("status %s", got.Status)
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
	if n := len(eng.requests()); n != 1 {
		t.Errorf("%d engine requests, want 1: the gateway ran its own new response twice", n)
	}
}
