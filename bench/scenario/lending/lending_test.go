package lending

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// fakeRunning is an engine whose /metrics report running sequences.
func fakeRunning(t *testing.T, running *atomic.Int64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %d\n", running.Load())
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSampleDuty: an engine busy throughout counts fully, an idle one not
// at all, and the busy time is split by the trainer's phases.
func TestSampleDuty(t *testing.T) {
	var busyN, idleN atomic.Int64
	busyN.Store(3)
	engines := []string{fakeRunning(t, &busyN), fakeRunning(t, &idleN)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*lendingSample)
	defer cancel()
	phase := 0
	d := sampleDuty(ctx, http.DefaultClient, engines, func(time.Time) bool { phase++; return phase%2 == 0 })
	if d.samples < 4 {
		t.Fatalf("%d samples", d.samples)
	}
	if d.duty < 0.49 || d.duty > 0.51 {
		t.Errorf("duty %.3f with one of two engines busy, want 0.5", d.duty)
	}
	if d.trainer == 0 || d.lent == 0 || d.trainer+d.lent != d.duty {
		t.Errorf("trainer %.3f + lent %.3f, want both parts of %.3f", d.trainer, d.lent, d.duty)
	}
	// An engine freed at once is seen free before the deadline.
	at, ok := waitFreed(context.Background(), http.DefaultClient, engines[1:], time.Now().Add(time.Second))
	if !ok || time.Since(at) > time.Second {
		t.Errorf("waitFreed on an idle engine: %v %v", at, ok)
	}
	if _, ok := waitFreed(context.Background(), http.DefaultClient, engines[:1], time.Now().Add(3*reclaimPoll)); ok {
		t.Error("waitFreed saw a busy engine free")
	}
}
