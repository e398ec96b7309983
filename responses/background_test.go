package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// refuseTimes makes the engine refuse n times (n < 0: always) with err.
func refuseTimes(n int32, err error) (refuse func() error, refused *atomic.Int32) {
	refused = new(atomic.Int32)
	return func() error {
		if n >= 0 && refused.Load() >= n {
			return nil
		}
		refused.Add(1)
		return err
	}, refused
}

// waitEnded waits for the job of background response id to end.
func waitEnded(t *testing.T, svc *Service, id string) {
	t.Helper()
	j := svc.job(id)
	if j == nil {
		return
	}
	select {
	case <-j.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("background response %s did not end in 10s", id)
	}
}

func createBackground(t *testing.T, svc *Service, tenant, input string) *wire.Response {
	t.Helper()
	resp, err := svc.Create(t.Context(), tenant, mustDecode(t, fmt.Sprintf(`{"model":"m","input":%q,"background":true}`, input)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// eventTypes lists the types of a response's stored events, checking that
// each is kept under its own sequence number.
func eventTypes(t *testing.T, st *StateStore, id string) []string {
	t.Helper()
	evs, err := st.Events(context.Background(), id, -1)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for i, data := range evs {
		var ev Event
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.SequenceNumber != i {
			t.Errorf("event %d (%s) has sequence number %d", i, ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
	}
	return types
}

func TestBackgroundRetriesRefusals(t *testing.T) {
	t.Run("refused then run", func(t *testing.T) {
		eng := &fakeEngine{}
		var refused *atomic.Int32
		eng.refuse, refused = refuseTimes(3, &dispatch.ShedError{Status: http.StatusServiceUnavailable, Reason: "saturated", RetryAfter: time.Millisecond})
		svc, st := newTestService(t, eng)
		resp := createBackground(t, svc, "a", "later")
		waitEnded(t, svc, resp.ID)
		got, err := svc.Get(t.Context(), "a", resp.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != wire.StatusCompleted || got.Output[0].Text() != "echo: later" {
			t.Fatalf("got %s %+v, want completed after the refusals", got.Status, got.Error)
		}
		if n := refused.Load(); n != 3 {
			t.Errorf("refused %d times, want 3", n)
		}
		if types := eventTypes(t, st.StateStore, resp.ID); types[len(types)-1] != "response.completed" || strings.Count(strings.Join(types, " "), "response.in_progress") != 1 {
			t.Errorf("events %v", types)
		}
	})
	for _, tc := range []struct {
		status int
		code   string
	}{
		{http.StatusTooManyRequests, "rate_limit_exceeded"},
		{http.StatusServiceUnavailable, "server_overloaded"},
	} {
		t.Run(fmt.Sprintf("gives up %d", tc.status), func(t *testing.T) {
			eng := &fakeEngine{}
			var refused *atomic.Int32
			eng.refuse, refused = refuseTimes(-1, &dispatch.ShedError{Status: tc.status, Reason: "saturated", RetryAfter: time.Millisecond})
			svc, st := newTestService(t, eng)
			svc.cfg.RetryRefusedFor = 50 * time.Millisecond
			resp := createBackground(t, svc, "a", "never")
			waitEnded(t, svc, resp.ID)
			got, _ := svc.Get(t.Context(), "a", resp.ID)
			if got.Status != wire.StatusFailed || got.Error == nil || got.Error.Code != tc.code {
				t.Fatalf("got %s %+v, want failed with %s", got.Status, got.Error, tc.code)
			}
			if strings.Contains(got.Error.Message, "turns:") || !strings.Contains(got.Error.Message, "Try again later") {
				t.Errorf("message %q: want a clear one, not the gateway's error", got.Error.Message)
			}
			if refused.Load() < 2 {
				t.Errorf("refused %d times: gave up without trying again", refused.Load())
			}
			if jobs, _ := st.PendingJobs(t.Context()); len(jobs) != 0 {
				t.Errorf("%d jobs still pending", len(jobs))
			}
		})
	}
	t.Run("close while waiting", func(t *testing.T) {
		dir := t.TempDir()
		st := openStore(t, dir)
		eng := &fakeEngine{}
		var refused *atomic.Int32
		eng.refuse, refused = refuseTimes(-1, &dispatch.ShedError{Status: http.StatusServiceUnavailable, Reason: "saturated", RetryAfter: time.Hour})
		svc := New(st.StateStore, eng, Config{CollectInterval: -1})
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		resp := createBackground(t, svc, "a", "after restart")
		waitFor(t, func() bool { return refused.Load() == 1 })
		start := time.Now()
		svc.Close(context.Background())
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Close took %v behind a job waiting to retry", d)
		}
		rec, err := st.GetResponse(t.Context(), "a", resp.ID)
		if err != nil || rec.Response.Ended() || rec.Job == nil {
			t.Fatalf("after Close: %+v %v, want still pending", rec.Response, err)
		}
		// The next start runs it.
		svc = New(st.StateStore, &fakeEngine{}, Config{CollectInterval: -1})
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitEnded(t, svc, resp.ID)
		svc.Close(context.Background())
		rec, _ = st.GetResponse(t.Context(), "a", resp.ID)
		st.Close()
		if rec.Response.Status != wire.StatusCompleted {
			t.Errorf("re-run: %s %+v", rec.Response.Status, rec.Response.Error)
		}
	})
}

// TestBackgroundEndStoredFirst: a background response's event log never
// announces an end its record does not hold. The disk fills while the
// engine answers: from then on every synced write fails, and the end is
// the first.
func TestBackgroundEndStoredFirst(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	ns := faulty(st.Namespace())
	eng := &fakeEngine{block: make(chan struct{})}
	svc := New(NewStore(ns, StoreOptions{}), eng, Config{CollectInterval: -1})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	var mu sync.Mutex
	var live []string
	resp := createBackground(t, svc, "a", "x")
	go svc.Stream(context.Background(), "a", resp.ID, -1, SinkFunc(func(typ string, _ []byte) error {
		mu.Lock()
		live = append(live, typ)
		mu.Unlock()
		return nil
	}))
	waitFor(t, func() bool { return len(eng.requests()) == 1 })
	ns.failSyncs(errors.New("disk full"))
	close(eng.block)
	waitEnded(t, svc, resp.ID)
	rec, err := st.GetResponse(t.Context(), "a", resp.ID)
	if err != nil || rec.Response.Ended() || rec.Job == nil {
		t.Fatalf("record %+v %v: want still pending after the failed end", rec.Response, err)
	}
	for _, typ := range eventTypes(t, st.StateStore, resp.ID) {
		if terminalEvent(wire.StatusCompleted) == typ || typ == "response.failed" {
			t.Errorf("event log holds %s, the record says %s", typ, rec.Response.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(live) > 0 && live[len(live)-1] == "response.completed" {
		t.Errorf("a live follower was told completed: %v", live)
	}
}

func TestBackgroundQueueCaps(t *testing.T) {
	eng := &fakeEngine{block: make(chan struct{})}
	svc, st := newTestService(t, eng)
	svc.cfg.MaxQueued, svc.cfg.MaxQueuedPerTenant = 3, 2
	refused := func(tenant string) {
		t.Helper()
		_, err := svc.Create(t.Context(), tenant, mustDecode(t, `{"model":"m","input":"x","background":true}`), nil, nil)
		var e *apierror.Error
		if !errors.As(err, &e) || !errors.Is(err, ErrRateLimited) || e.Code != "rate_limit_exceeded" || e.Message == "" {
			t.Fatalf("over the cap: %v, want rate_limit_exceeded", err)
		}
	}
	pending := func(want int) {
		t.Helper()
		if jobs, _ := st.PendingJobs(t.Context()); len(jobs) != want {
			t.Errorf("%d jobs stored, want %d", len(jobs), want)
		}
	}
	a1 := createBackground(t, svc, "a", "1")
	a2 := createBackground(t, svc, "a", "2")
	refused("a") // the tenant's cap
	pending(2)
	b1 := createBackground(t, svc, "b", "1")
	refused("b") // the service's cap
	pending(3)
	// Foreground turns are not queued, so not capped.
	done := make(chan error, 1)
	go func() {
		_, err := svc.Create(context.Background(), "a", mustDecode(t, `{"model":"m","input":"now"}`), nil, nil)
		done <- err
	}()
	close(eng.block)
	if err := <-done; err != nil {
		t.Errorf("foreground over the cap: %v", err)
	}
	for _, r := range []*wire.Response{a1, a2, b1} {
		waitEnded(t, svc, r.ID)
	}
	createBackground(t, svc, "a", "3")
}
