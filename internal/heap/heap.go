package heap

// Order ranks a Heap's elements and tells them where they stand. It is
// implemented by a type with no fields, so a Heap carries none.
type Order[T any] interface {
	// Less reports whether a comes out before b.
	Less(a, b T) bool
	// SetIndex tells x its index in the heap, -1 once it has left.
	SetIndex(x T, i int)
}

// Heap is a binary min-heap of T, least first by O. The zero value is an
// empty heap.
type Heap[T any, O Order[T]] struct {
	items []T
	order O
}

// Len is the number of elements.
func (h *Heap[T, O]) Len() int { return len(h.items) }

// Cap is how many elements the heap holds before it allocates.
func (h *Heap[T, O]) Cap() int { return cap(h.items) }

// At returns the element at index i; At(0) is the least.
func (h *Heap[T, O]) At(i int) T { return h.items[i] }

// Push adds x.
func (h *Heap[T, O]) Push(x T) {
	h.items = append(h.items, x)
	h.up(len(h.items) - 1)
}

// Pop removes the least element and returns it. The heap must not be
// empty.
func (h *Heap[T, O]) Pop() T {
	return h.Remove(0)
}

// Remove removes the element at index i and returns it.
func (h *Heap[T, O]) Remove(i int) T {
	n := len(h.items) - 1
	x := h.items[i]
	h.items[i] = h.items[n]
	var zero T
	h.items[n] = zero // no stale reference behind the end
	h.items = h.items[:n]
	if i != n && !h.down(i, n) {
		h.up(i)
	}
	h.order.SetIndex(x, -1)
	return x
}

// Fix restores the order after the element at index i has changed its
// key.
func (h *Heap[T, O]) Fix(i int) {
	if !h.down(i, len(h.items)) {
		h.up(i)
	}
}

// Reset empties the heap, keeping its memory. The elements are not told.
func (h *Heap[T, O]) Reset() {
	clear(h.items)
	h.items = h.items[:0]
}

// up moves the element at j toward the root past every parent it is less
// than. Parents move down into the hole it leaves, and it is told its
// index once, where it stops.
func (h *Heap[T, O]) up(j int) {
	x := h.items[j]
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !h.order.Less(x, h.items[i]) {
			break
		}
		h.set(j, h.items[i])
		j = i
	}
	h.set(j, x)
}

// down moves the element at i0 away from the root, within the first n,
// past every lesser child, and reports whether it moved.
func (h *Heap[T, O]) down(i0, n int) bool {
	x := h.items[i0]
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.order.Less(h.items[j2], h.items[j1]) {
			j = j2 // right child
		}
		if !h.order.Less(h.items[j], x) {
			break
		}
		h.set(i, h.items[j])
		i = j
	}
	h.set(i, x)
	return i > i0
}

// set puts x at index i and tells it so.
func (h *Heap[T, O]) set(i int, x T) {
	h.items[i] = x
	h.order.SetIndex(x, i)
}
