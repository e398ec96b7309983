package state_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// TestRedisHealth (issue 32): with redis-server stopped, an operation
// fails with ErrUnavailable and Health says so, and with no operation the
// probe finds it too; restarted, the probe alone brings Health back,
// and writes succeed again.
func TestRedisHealth(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	db := openRedis(t, srv.URL(), state.RedisOptions{HealthInterval: 20 * time.Millisecond})
	ns := db.Namespace("t/")
	put(t, ns, "k", "v")
	if err := db.Health(); err != nil {
		t.Fatalf("a server that answers: %v", err)
	}

	srv.Kill()
	// No operation: the probe finds the outage.
	waitUntil(t, "Health to report the server down", func() bool { return db.Health() != nil })
	if err := db.Health(); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("Health with the server down: %v, want ErrUnavailable", err)
	}
	if err := ns.Put(ctx, []byte("k"), []byte("w")); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("a put with the server down: %v, want ErrUnavailable", err)
	}
	if _, err := ns.Get(ctx, []byte("k")); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("a get with the server down: %v, want ErrUnavailable", err)
	}

	srv.Restart()
	// No operation again: the probe sees the server back.
	waitUntil(t, "Health to report the server back", func() bool { return db.Health() == nil })
	put(t, ns, "k", "w")
	if v, err := ns.Get(ctx, []byte("k")); err != nil || string(v) != "w" {
		t.Fatalf("after the restart: %q, %v", v, err)
	}
}

// waitUntil polls cond until it holds, failing t after fifteen seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited fifteen seconds for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
