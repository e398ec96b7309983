package state

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// faultEngine is a memory engine that fails every call while failing is
// set, and parks a call in gate when one is set, for the health tests.
type faultEngine struct {
	flatEngine
	failing atomic.Bool
	// gate, when not nil, is where the next apply waits: it receives the
	// signal that the apply has begun, then waits for the reply.
	gate chan chan struct{}
}

var errDown = errors.New("connection refused")

func (f *faultEngine) get(key []byte) ([]byte, error) {
	if f.failing.Load() {
		return nil, errDown
	}
	return f.flatEngine.get(key)
}

func (f *faultEngine) scan(lo, hi []byte, reverse bool, fn func(key, value []byte) error) error {
	if f.failing.Load() {
		return errDown
	}
	return f.flatEngine.scan(lo, hi, reverse, fn)
}

func (f *faultEngine) apply(prefix []byte, b *Batch) error {
	if f.gate != nil {
		began := make(chan struct{})
		f.gate <- began
		<-began
	}
	if f.failing.Load() {
		return errDown
	}
	return f.flatEngine.apply(prefix, b)
}

func newFaultDB() (*DB, *faultEngine) {
	f := &faultEngine{flatEngine: &memEngine{}}
	return newDB(newFlat(f), slog.New(slog.DiscardHandler)), f
}

// TestHealth: the DB's health follows the outcome of its operations: a
// failure of the store's takes it down and is of class ErrUnavailable; a
// success of an operation begun after that failure brings it back; what
// the caller did (a scan's own error, a context it ended) and a missing
// key say nothing of the store.
func TestHealth(t *testing.T) {
	ctx := context.Background()
	db, f := newFaultDB()
	defer db.Close()
	ns := db.Namespace("t/")
	if err := db.Health(); err != nil {
		t.Fatalf("a new DB: %v", err)
	}

	f.failing.Store(true)
	err := ns.Put(ctx, []byte("k"), []byte("v"))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errDown) {
		t.Fatalf("a put the store failed: %v, want ErrUnavailable wrapping the cause", err)
	}
	if err := db.Health(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errDown) {
		t.Fatalf("after a failure: %v, want ErrUnavailable wrapping the cause", err)
	}
	if err := ns.Health(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("the namespace's health: %v", err)
	}

	f.failing.Store(false)
	if _, err := ns.Get(ctx, []byte("missing")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of a missing key: %v", err)
	}
	if err := db.Health(); err != nil {
		t.Fatalf("a not-found answer is an answer: %v", err)
	}

	stop := errors.New("stop")
	ns.Put(ctx, []byte("a"), []byte("1"))
	if err := ns.Scan(ctx, Range{}, func(_, _ []byte) error { return stop }); err != stop {
		t.Fatalf("a scan fn's error came back as %v", err)
	}
	if err := db.Health(); err != nil {
		t.Fatalf("a scan fn's error: %v", err)
	}

	f.failing.Store(true)
	if err := ns.Scan(ctx, Range{}, func(_, _ []byte) error { return nil }); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a scan the store failed: %v", err)
	}
	f.failing.Store(false)
	if err := ns.Put(ctx, []byte("a"), []byte("2")); err != nil || db.Health() != nil {
		t.Fatalf("a put once the store answers: %v, health %v", err, db.Health())
	}

	f.failing.Store(true)
	// The caller gives up while the store fails its put.
	cancelled, cancel := context.WithCancel(ctx)
	gate := make(chan chan struct{})
	f.gate = gate
	go func() { began := <-gate; cancel(); close(began) }()
	if err := ns.Put(cancelled, []byte("k"), []byte("v")); err == nil {
		t.Fatal("a put the store failed succeeded")
	}
	f.gate = nil
	if err := db.Health(); err != nil {
		t.Fatalf("the failure of a caller that gave up: %v", err)
	}
}

// TestHealthStaleSuccess: an operation that began before an outage and
// was answered after the failure that showed it does not bring the store
// back; one begun after it does.
func TestHealthStaleSuccess(t *testing.T) {
	ctx := context.Background()
	db, f := newFaultDB()
	defer db.Close()
	ns := db.Namespace("t/")
	f.gate = make(chan chan struct{})
	done := make(chan error)
	go func() { done <- ns.Put(ctx, []byte("old"), []byte("v")) }()
	began := <-f.gate // the old put has begun, while the store is up

	// Another caller meets the outage meanwhile.
	f.failing.Store(true)
	db.health.end(ctx, db.health.begin(), errDown)
	f.failing.Store(false)

	close(began) // the old put is answered
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := db.Health(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a success begun before the outage brought the store back: %v", err)
	}
	f.gate = nil
	if err := ns.Put(ctx, []byte("new"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.Health(); err != nil {
		t.Fatalf("a success begun after the outage: %v", err)
	}
}

// TestHealthCheck: a check pings while no operation has been answered
// since the last, takes the store down when the ping fails and brings it
// back when one succeeds; while operations are answered it does not ping.
func TestHealthCheck(t *testing.T) {
	ctx := context.Background()
	db, _ := newFaultDB()
	defer db.Close()
	ns := db.Namespace("t/")
	var pingErr error
	pings := 0
	check := func() {
		db.health.check(ctx, func(context.Context) error { pings++; return pingErr }, time.Second)
	}
	check()
	if pings != 1 || db.Health() != nil {
		t.Fatalf("an idle store: %d pings, health %v", pings, db.Health())
	}
	ns.Get(ctx, []byte("k"))
	check()
	if pings != 1 {
		t.Fatalf("after an answered get: %d pings, want none more", pings)
	}
	check()
	if pings != 2 {
		t.Fatalf("idle again: %d pings, want 2", pings)
	}
	pingErr = errDown
	check()
	if err := db.Health(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errDown) {
		t.Fatalf("a failed ping: health %v", err)
	}
	check()
	if pings != 4 {
		t.Fatalf("while down: %d pings, want every check to ping", pings)
	}
	pingErr = nil
	check()
	if err := db.Health(); err != nil {
		t.Fatalf("a ping answered: health %v", err)
	}
}

// TestHealthProbe: the probe runs the checks on its own until Close.
func TestHealthProbe(t *testing.T) {
	db, _ := newFaultDB()
	var down atomic.Bool
	db.startProbe(func(context.Context) error {
		if down.Load() {
			return errDown
		}
		return nil
	}, time.Millisecond, time.Second)
	down.Store(true)
	waitFor(t, "the store down", func() bool { return db.Health() != nil })
	down.Store(false)
	waitFor(t, "the store back", func() bool { return db.Health() == nil })
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing t after ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited ten seconds for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
