package state_test

import (
	"errors"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// TestRecords: a record is created only where none is, swapped only for
// the value the writer read, deleted by a swap to nil, and gone once it
// expires; on memory and on two clients of one Redis, as two gateways
// are.
func TestRecords(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		r := state.NewMemory().Records("idem")
		checkRecords(t, r, r)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		checkRecords(t, openRedis(t, srv.URL(), state.RedisOptions{}).Records("idem"), openRedis(t, srv.URL(), state.RedisOptions{}).Records("idem"))
	})
}

func checkRecords(t *testing.T, a, b *state.Records) {
	ctx := t.Context()
	k := []byte("tenant/key")
	if _, err := a.Get(ctx, k); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Get of a missing record: %v, want ErrNotFound", err)
	}
	if ok, err := a.Create(ctx, k, []byte("running-a"), time.Minute); !ok || err != nil {
		t.Fatalf("Create of a new record: %v %v", ok, err)
	}
	if ok, err := b.Create(ctx, k, []byte("running-b"), time.Minute); ok || err != nil {
		t.Fatalf("a second Create of one key: %v %v, want refused", ok, err)
	}
	if ok, err := b.Swap(ctx, k, []byte("running-b"), []byte("done-b"), time.Minute); ok || err != nil {
		t.Fatalf("Swap of a value not held: %v %v, want refused", ok, err)
	}
	if ok, err := a.Swap(ctx, k, []byte("running-a"), []byte("done-a"), time.Minute); !ok || err != nil {
		t.Fatalf("Swap of the value held: %v %v", ok, err)
	}
	if v, err := b.Get(ctx, k); string(v) != "done-a" || err != nil {
		t.Fatalf("Get after the swap: %q %v", v, err)
	}
	if ok, err := b.Swap(ctx, k, []byte("done-a"), nil, time.Minute); !ok || err != nil {
		t.Fatalf("Swap to nil: %v %v", ok, err)
	}
	if _, err := a.Get(ctx, k); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Get of a deleted record: %v, want ErrNotFound", err)
	}
	if ok, err := a.Create(ctx, k, []byte("short"), time.Millisecond); !ok || err != nil {
		t.Fatalf("Create after a delete: %v %v", ok, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := b.Get(ctx, k)
		if errors.Is(err, state.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a record of 1ms still there after a minute: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ok, err := b.Create(ctx, k, []byte("again"), time.Minute); !ok || err != nil {
		t.Fatalf("Create over an expired record: %v %v", ok, err)
	}
}
