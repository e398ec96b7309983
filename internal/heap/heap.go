package heap

import "cmp"

// Heap is a binary min-heap of elements of type T, each pushed with a key
// and a tie: the least key comes out first, and among equal keys the least
// tie (an arrival sequence, a position). Keys and ties are compared in
// place, by the heap's own code, never through a call: ordering is most of
// a heap's work, and a call through a function or a type parameter's
// method is not inlined.
//
// A heap from NewIndexed tells each element its index whenever it moves,
// and -1 when it leaves, so that the owner can Fix or Remove it by index.
// The zero value is an empty heap that tells its elements nothing.
type Heap[K cmp.Ordered, T any] struct {
	items    []entry[K, T]
	setIndex func(x T, i int)
}

type entry[K cmp.Ordered, T any] struct {
	key K
	tie uint64
	x   T
}

func (e *entry[K, T]) less(f *entry[K, T]) bool {
	return e.key < f.key || e.key == f.key && e.tie < f.tie
}

// NewIndexed returns an empty heap that calls setIndex with an element and
// its new index each time the element moves, and with -1 when it leaves.
func NewIndexed[K cmp.Ordered, T any](setIndex func(x T, i int)) Heap[K, T] {
	return Heap[K, T]{setIndex: setIndex}
}

// Len is the number of elements.
func (h *Heap[K, T]) Len() int { return len(h.items) }

// Cap is how many elements the heap holds before it allocates.
func (h *Heap[K, T]) Cap() int { return cap(h.items) }

// At returns the element at index i; At(0) is the least.
func (h *Heap[K, T]) At(i int) T { return h.items[i].x }

// Push adds x with its key and tie.
func (h *Heap[K, T]) Push(x T, key K, tie uint64) {
	h.items = append(h.items, entry[K, T]{key: key, tie: tie, x: x})
	h.up(len(h.items) - 1)
}

// Pop removes the least element and returns it. The heap must not be
// empty.
func (h *Heap[K, T]) Pop() T {
	return h.Remove(0)
}

// Remove removes the element at index i and returns it.
func (h *Heap[K, T]) Remove(i int) T {
	n := len(h.items) - 1
	x := h.items[i].x
	h.items[i] = h.items[n]
	h.items[n] = entry[K, T]{} // no stale reference behind the end
	h.items = h.items[:n]
	if i != n && !h.down(i, n) {
		h.up(i)
	}
	if h.setIndex != nil {
		h.setIndex(x, -1)
	}
	return x
}

// Fix gives the element at index i a new key and tie, and restores the
// order.
func (h *Heap[K, T]) Fix(i int, key K, tie uint64) {
	h.items[i].key, h.items[i].tie = key, tie
	if !h.down(i, len(h.items)) {
		h.up(i)
	}
}

// Reset empties the heap, keeping its memory. The elements are not told.
func (h *Heap[K, T]) Reset() {
	clear(h.items)
	h.items = h.items[:0]
}

// up moves the element at j toward the root past every parent it is less
// than. Parents move down into the hole it leaves, and it is told its
// index once, where it stops. The comparisons are container/heap's, so an
// element ends where it would there.
func (h *Heap[K, T]) up(j int) {
	e := h.items[j]
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !e.less(&h.items[i]) {
			break
		}
		h.set(j, h.items[i])
		j = i
	}
	h.set(j, e)
}

// down moves the element at i0 away from the root, within the first n,
// past every lesser child, and reports whether it moved.
func (h *Heap[K, T]) down(i0, n int) bool {
	e := h.items[i0]
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.items[j2].less(&h.items[j1]) {
			j = j2 // right child
		}
		if !h.items[j].less(&e) {
			break
		}
		h.set(i, h.items[j])
		i = j
	}
	h.set(i, e)
	return i > i0
}

// set puts e at index i and tells its element so.
func (h *Heap[K, T]) set(i int, e entry[K, T]) {
	h.items[i] = e
	if h.setIndex != nil {
		h.setIndex(e.x, i)
	}
}
