package lru

// Node names a node of a List. The zero Node names none: a list numbers
// its nodes from 1, and a caller may use 0 for "not in the list".
type Node int32

// List is a doubly linked list of values in least-recently-used order,
// most recent at the front. Its nodes live in one slice: a freed node is
// reused by the next push, so a list held at its bound churns without
// allocating. A Node stays valid until it is removed; a pointer from Value
// until the next push, which may grow the slice.
//
// The zero value is an empty list.
type List[V any] struct {
	// nodes[0] is the sentinel: its next is the front, its prev the back.
	nodes []node[V]
	// free chains the freed nodes through next; 0 ends it.
	free Node
	len  int
}

type node[V any] struct {
	value      V
	prev, next Node
}

// Len is the number of values in the list.
func (l *List[V]) Len() int { return l.len }

// Front is the most recent node, 0 when the list is empty.
func (l *List[V]) Front() Node {
	if l.len == 0 {
		return 0
	}
	return l.nodes[0].next
}

// Back is the least recent node, 0 when the list is empty.
func (l *List[V]) Back() Node {
	if l.len == 0 {
		return 0
	}
	return l.nodes[0].prev
}

// Next is the node behind n, less recent, 0 past the back.
func (l *List[V]) Next(n Node) Node { return l.nodes[n].next }

// Prev is the node ahead of n, more recent, 0 past the front.
func (l *List[V]) Prev(n Node) Node { return l.nodes[n].prev }

// Value is n's value, valid until the next push.
func (l *List[V]) Value(n Node) *V { return &l.nodes[n].value }

// Grow makes room for n more values, so that the pushes up to them do not
// allocate.
func (l *List[V]) Grow(n int) {
	if need := len(l.nodes) + n + 1; need > cap(l.nodes) {
		nodes := make([]node[V], len(l.nodes), need)
		copy(nodes, l.nodes)
		l.nodes = nodes
	}
}

// PushFront puts v at the front, the most recent, and returns its node.
func (l *List[V]) PushFront(v V) Node {
	n := l.alloc(v)
	l.link(0, n)
	return n
}

// InsertAfter puts v right behind node at, as recent as it, and returns
// its node.
func (l *List[V]) InsertAfter(v V, at Node) Node {
	n := l.alloc(v)
	l.link(at, n)
	return n
}

// MoveToFront makes n the most recent.
func (l *List[V]) MoveToFront(n Node) {
	l.unlink(n)
	l.link(0, n)
}

// MoveAfter moves n right behind node at; it does nothing when n is at.
func (l *List[V]) MoveAfter(n, at Node) {
	if n == at {
		return
	}
	l.unlink(n)
	l.link(at, n)
}

// Remove takes n out of the list and returns its value. n must be in the
// list; it names nothing after, until a push reuses it.
func (l *List[V]) Remove(n Node) V {
	l.unlink(n)
	v := l.nodes[n].value
	l.nodes[n] = node[V]{next: l.free}
	l.free = n
	l.len--
	return v
}

// Reset empties the list, keeping its memory.
func (l *List[V]) Reset() {
	clear(l.nodes)
	l.nodes = l.nodes[:min(len(l.nodes), 1)]
	l.free = 0
	l.len = 0
}

// alloc takes a free node for v, or a new one.
func (l *List[V]) alloc(v V) Node {
	var n Node
	if l.free != 0 {
		n = l.free
		l.free = l.nodes[n].next
		l.nodes[n].value = v
	} else {
		if len(l.nodes) == 0 {
			l.nodes = append(l.nodes, node[V]{}) // the sentinel
		}
		n = Node(len(l.nodes))
		l.nodes = append(l.nodes, node[V]{value: v})
	}
	l.len++
	return n
}

// link puts n right behind at; behind the sentinel is the front.
func (l *List[V]) link(at, n Node) {
	next := l.nodes[at].next
	l.nodes[n].prev = at
	l.nodes[n].next = next
	l.nodes[next].prev = n
	l.nodes[at].next = n
}

func (l *List[V]) unlink(n Node) {
	p, q := l.nodes[n].prev, l.nodes[n].next
	l.nodes[p].next = q
	l.nodes[q].prev = p
}
