// Package heap is a binary min-heap that tells its elements where they
// stand, so that one can be fixed after its key changes, or removed, in
// O(log n) without a search.
//
// # Overview
//
// A Heap[T, O] keeps its elements in a slice ordered by O, an Order: a
// type with no fields whose Less ranks two elements and whose SetIndex
// tells an element its index each time it moves (and -1 when it leaves).
// Elements that are fixed or removed by index keep that index in
// themselves; a heap whose elements only go in and come out at the top
// gives SetIndex an empty body. The algorithm is container/heap's,
// comparison for comparison, so every element ends at the index it would
// there and a heap moved onto this one orders ties as it did; but an
// element sifts into a hole instead of by swaps, so each one that moves is
// told its index once, and nothing is boxed in an interface. The zero
// value is ready to use.
//
// # Concurrency model
//
// A Heap is not safe for concurrent use: the owner locks around it.
package heap
