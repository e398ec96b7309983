package lru

import "iter"

// Cache is a map bounded by evicting the least recently used entries. An
// entry costs 1, or what the cost function says (its bytes, say); adding
// one evicts from the least recent end while the entries' total cost is
// over the capacity. Get marks an entry most recent, Peek does not.
//
// The zero value is an empty cache with no bound, each entry costing 1.
type Cache[K comparable, V any] struct {
	list     List[entry[K, V]]
	index    map[K]Node
	cost     func(K, V) int64
	capacity int64
	total    int64
}

type entry[K comparable, V any] struct {
	key   K
	value V
	cost  int64
}

// NewCache returns an empty cache holding at most capacity: entries, or
// with cost not nil the sum of cost over its entries, each taken when the
// entry is added. A capacity of 0 or less is no bound.
func NewCache[K comparable, V any](capacity int64, cost func(K, V) int64) *Cache[K, V] {
	return &Cache[K, V]{index: make(map[K]Node), cost: cost, capacity: capacity}
}

// Len is the number of entries.
func (c *Cache[K, V]) Len() int { return c.list.Len() }

// Cost is the entries' total cost: their number when the cache has no
// cost function.
func (c *Cache[K, V]) Cost() int64 { return c.total }

// Get returns k's value and marks it the most recently used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	n, ok := c.index[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.list.MoveToFront(n)
	return c.list.Value(n).value, true
}

// Peek returns k's value, leaving the order as it is.
func (c *Cache[K, V]) Peek(k K) (V, bool) {
	n, ok := c.index[k]
	if !ok {
		var zero V
		return zero, false
	}
	return c.list.Value(n).value, true
}

// Add sets k's value, the most recently used, and then evicts the least
// recently used entries while the total cost is over the capacity, the
// new one too if it alone is. It returns how many it evicted.
func (c *Cache[K, V]) Add(k K, v V) (evicted int) {
	cost := int64(1)
	if c.cost != nil {
		cost = c.cost(k, v)
	}
	if n, ok := c.index[k]; ok {
		e := c.list.Value(n)
		c.total += cost - e.cost
		e.value, e.cost = v, cost
		c.list.MoveToFront(n)
	} else {
		if c.index == nil {
			c.index = make(map[K]Node)
		}
		c.index[k] = c.list.PushFront(entry[K, V]{key: k, value: v, cost: cost})
		c.total += cost
	}
	for c.capacity > 0 && c.total > c.capacity && c.list.Len() > 0 {
		c.RemoveOldest()
		evicted++
	}
	return evicted
}

// Remove takes k out and returns its value.
func (c *Cache[K, V]) Remove(k K) (V, bool) {
	n, ok := c.index[k]
	if !ok {
		var zero V
		return zero, false
	}
	delete(c.index, k)
	e := c.list.Remove(n)
	c.total -= e.cost
	return e.value, true
}

// Oldest returns the least recently used entry.
func (c *Cache[K, V]) Oldest() (k K, v V, ok bool) {
	n := c.list.Back()
	if n == 0 {
		return k, v, false
	}
	e := c.list.Value(n)
	return e.key, e.value, true
}

// RemoveOldest takes out the least recently used entry and returns it.
func (c *Cache[K, V]) RemoveOldest() (k K, v V, ok bool) {
	n := c.list.Back()
	if n == 0 {
		return k, v, false
	}
	e := c.list.Remove(n)
	delete(c.index, e.key)
	c.total -= e.cost
	return e.key, e.value, true
}

// All yields the entries, the most recently used first, leaving the order
// as it is. The cache must not change during the walk.
func (c *Cache[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for n := c.list.Front(); n != 0; n = c.list.Next(n) {
			e := c.list.Value(n)
			if !yield(e.key, e.value) {
				return
			}
		}
	}
}
