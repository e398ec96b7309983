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

// entry is an element with its key and tie; the tie first, so that a small
// key packs with the element.
type entry[K cmp.Ordered, T any] struct {
	tie uint64
	key K
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
	n := len(h.items) - 1
	x := h.items[0].x
	h.items[0] = h.items[n]
	h.items[n] = entry[K, T]{} // no stale reference behind the end
	h.items = h.items[:n]
	if n > 0 {
		h.down(0, n)
	}
	if h.setIndex != nil {
		h.setIndex(x, -1)
	}
	return x
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
// element ends where it would there. setIndex must not touch the heap.
func (h *Heap[K, T]) up(j int) {
	items, tell := h.items, h.setIndex
	e := items[j]
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !e.less(&items[i]) {
			break
		}
		put(items, tell, j, items[i])
		j = i
	}
	put(items, tell, j, e)
}

// down moves the element at i0 away from the root, within the first n,
// past every lesser child, and reports whether it moved. 2*i+1 cannot
// overflow: a slice of entries of eight bytes or more has fewer than
// MaxInt/8 of them.
func (h *Heap[K, T]) down(i0, n int) bool {
	items, tell := h.items[:n], h.setIndex
	e := items[i0]
	i := i0
	for {
		j := 2*i + 1 // left child
		if j >= len(items) {
			break
		}
		if j2 := j + 1; j2 < len(items) && items[j2].less(&items[j]) {
			j = j2 // right child
		}
		if !items[j].less(&e) {
			break
		}
		put(items, tell, i, items[j])
		i = j
	}
	put(items, tell, i, e)
	return i > i0
}

// put puts e at index i of items and tells its element so.
func put[K cmp.Ordered, T any](items []entry[K, T], tell func(T, int), i int, e entry[K, T]) {
	items[i] = e
	if tell != nil {
		tell(e.x, i)
	}
}
