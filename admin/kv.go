package admin

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
)

// KV is the slice of the state store the admin API needs: a key-value
// namespace of its own, scanned by prefix. It has the shape of
// responses.Meta, so the embedded Pebble store's Meta("admin") is one as it
// is; MemKV is the in-memory one. Implementations must be safe for
// concurrent use, must make a Put durable before it returns, and must not
// keep the slices they are given.
type KV interface {
	// Put stores value under key, replacing what was there.
	Put(ctx context.Context, key, value []byte) error
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key []byte) error
	// Scan calls fn for every key starting with prefix, in key order; the
	// slices are valid only during the call. It stops at fn's first error
	// and returns it.
	Scan(ctx context.Context, prefix []byte, fn func(key, value []byte) error) error
}

// Keys of the namespace.
const (
	kvTenantPrefix = "tenants/" // + name → Tenant as JSON
	kvKeyPrefix    = "keys/"    // + key id → storedKey as JSON
	kvFlowControl  = "flowcontrol"
)

// MemKV is a KV in memory, for tests and for a gateway without durable
// state. The zero value is ready to use.
type MemKV struct {
	mu struct {
		sync.Mutex
		// protects the fields below
		m map[string][]byte
	}
}

// Put implements KV.
func (m *MemKV) Put(_ context.Context, key, value []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.m == nil {
		m.mu.m = make(map[string][]byte)
	}
	m.mu.m[string(key)] = slices.Clone(value)
	return nil
}

// Get returns the value under key, or ErrNotFound.
func (m *MemKV) Get(_ context.Context, key []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.mu.m[string(key)]
	if !ok {
		return nil, ErrNotFound
	}
	return slices.Clone(v), nil
}

// Delete implements KV.
func (m *MemKV) Delete(_ context.Context, key []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.mu.m, string(key))
	return nil
}

// Scan implements KV. It calls fn on copies taken under the lock, so fn
// may call back into m.
func (m *MemKV) Scan(_ context.Context, prefix []byte, fn func(key, value []byte) error) error {
	type kv struct{ k, v []byte }
	m.mu.Lock()
	var hits []kv
	for k, v := range m.mu.m {
		if strings.HasPrefix(k, string(prefix)) {
			hits = append(hits, kv{[]byte(k), slices.Clone(v)})
		}
	}
	m.mu.Unlock()
	slices.SortFunc(hits, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	for _, h := range hits {
		if err := fn(h.k, h.v); err != nil {
			return err
		}
	}
	return nil
}

var _ KV = (*MemKV)(nil)
