package sessions

import (
	"bytes"
	"context"
	"sort"
	"sync"
	"testing"
	"time"
)

// mapKV is an in-memory KV with the ordering contract of the real one.
type mapKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (k *mapKV) Put(_ context.Context, key, value []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string][]byte{}
	}
	k.m[string(key)] = bytes.Clone(value)
	return nil
}

func (k *mapKV) Delete(_ context.Context, key []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, string(key))
	return nil
}

func (k *mapKV) Scan(_ context.Context, prefix []byte, fn func(key, value []byte) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var keys []string
	for key := range k.m {
		if bytes.HasPrefix([]byte(key), prefix) {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		if err := fn([]byte(key), k.m[key]); err != nil {
			return err
		}
	}
	return nil
}

// TestKVPinStoreSurvivesRestart: pins written through one Store come back
// in a new Store over the same namespace, and an unpin is durable too.
func TestKVPinStoreSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	kv := &mapKV{}
	ps := &KVPinStore{KV: kv, Clock: func() time.Time { return now }}
	s1, err := NewStore(Options{Pins: ps})
	if err != nil {
		t.Fatal(err)
	}
	s1.Touch("acme", "sess-1", now)
	s1.Touch("acme", "sess-2", now)
	s1.Touch("other", "sess-1", now)
	for _, p := range []struct{ tenant, key, ep string }{{"acme", "sess-1", "10.0.0.1:8000"}, {"acme", "sess-2", "10.0.0.2:8000"}, {"other", "sess-1", "10.0.0.3:8000"}} {
		if err := s1.Pin(ctx, p.tenant, p.key, p.ep, 4, PinNew, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s1.Unpin(ctx, "acme", "sess-2", PinRemoved); err != nil {
		t.Fatal(err)
	}

	s2, err := NewStore(Options{Pins: ps})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s2.LoadPins(ctx, now.Add(time.Minute)); err != nil || n != 2 {
		t.Fatalf("LoadPins = %d, %v; want 2 pins", n, err)
	}
	for _, c := range []struct{ tenant, key, want string }{{"acme", "sess-1", "10.0.0.1:8000"}, {"acme", "sess-2", ""}, {"other", "sess-1", "10.0.0.3:8000"}} {
		if ep, _ := s2.Pinned(c.tenant, c.key, now.Add(time.Minute)); ep != c.want {
			t.Errorf("%s/%s pinned to %q after restart, want %q", c.tenant, c.key, ep, c.want)
		}
	}
}
