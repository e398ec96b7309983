package state

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"time"
)

// NewMemory is a DB in memory, for tests and for a gateway that keeps no
// state across restarts. Every write is "durable" at once; Close drops
// the data.
func NewMemory() *DB { return newDB(newFlat(&memEngine{}), nil) }

// NewMemoryAt is NewMemory with its leases timed by now, a clock a test
// moves: a lease runs out when the test moves the clock past it.
func NewMemoryAt(now func() time.Time) *DB {
	f := newFlat(&memEngine{})
	f.leases.now = now
	return newDB(f, nil)
}

// memEngine keeps entries in a slice sorted by key: a scan is a binary
// search and a copy, a write a binary search and a move of the tail, which
// is cheap at the sizes tests and a single gateway's memory hold.
type memEngine struct {
	mu struct {
		sync.Mutex
		// protects the field below
		entries []memEntry // sorted by key, no duplicates
	}
}

type memEntry struct {
	key   string
	value []byte
}

func cmpEntry(e memEntry, key string) int { return strings.Compare(e.key, key) }

func (m *memEngine) findLocked(key []byte) (int, bool) {
	return slices.BinarySearchFunc(m.mu.entries, string(key), cmpEntry)
}

func (m *memEngine) get(key []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.findLocked(key)
	if !ok {
		return nil, ErrNotFound
	}
	return bytes.Clone(m.mu.entries[i].value), nil
}

// scan copies the range under the lock and calls fn outside it: the view
// is consistent and fn does not hold up writers.
func (m *memEngine) scan(lo, hi []byte, reverse bool, fn func(key, value []byte) error) error {
	m.mu.Lock()
	i, _ := m.findLocked(lo)
	j, _ := m.findLocked(hi)
	hits := make([]memEntry, 0, max(j-i, 0))
	for _, e := range m.mu.entries[i:max(i, j)] {
		hits = append(hits, memEntry{key: e.key, value: bytes.Clone(e.value)})
	}
	m.mu.Unlock()
	if reverse {
		slices.Reverse(hits)
	}
	for _, e := range hits {
		if err := fn([]byte(e.key), e.value); err != nil {
			return err
		}
	}
	return nil
}

// apply holds the lock across the whole batch, so no reader sees part of
// it.
func (m *memEngine) apply(prefix []byte, b *Batch) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var buf []byte
	for _, o := range b.ops {
		buf = append(append(buf[:0], prefix...), o.key...)
		i, found := m.findLocked(buf)
		switch o.kind {
		case opPut:
			v := bytes.Clone(o.value)
			if o.enc != nil {
				v = o.bytes()
			}
			if found {
				m.mu.entries[i].value = v
			} else {
				m.mu.entries = slices.Insert(m.mu.entries, i, memEntry{key: string(buf), value: v})
			}
		case opDelete:
			if found {
				m.mu.entries = slices.Delete(m.mu.entries, i, i+1)
			}
		case opDeletePrefix:
			j, _ := m.findLocked(prefixEnd(buf))
			m.mu.entries = slices.Delete(m.mu.entries, i, j)
		}
	}
	return nil
}

func (m *memEngine) close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.entries = nil
	return nil
}

var _ flatEngine = (*memEngine)(nil)
