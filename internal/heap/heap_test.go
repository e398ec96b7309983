package heap

import (
	stdheap "container/heap"
	"math/rand/v2"
	"slices"
	"testing"
)

// item is an element that knows its index, as the turn queues' do.
type item struct {
	key, seq int
	idx      int
}

type byKey struct{}

func (byKey) Less(a, b *item) bool {
	return a.key < b.key || a.key == b.key && a.seq < b.seq
}
func (byKey) SetIndex(x *item, i int) { x.idx = i }

// checkIndexes fails unless every element knows its index and the heap
// property holds.
func checkIndexes(t testing.TB, h *Heap[*item, byKey]) {
	t.Helper()
	for i := range h.Len() {
		if h.At(i).idx != i {
			t.Fatalf("element at %d says %d", i, h.At(i).idx)
		}
		if p := (i - 1) / 2; i > 0 && (byKey{}).Less(h.At(i), h.At(p)) {
			t.Fatalf("element at %d is less than its parent", i)
		}
	}
}

func TestHeap(t *testing.T) {
	// Each step runs on a heap of keys 5, 3, 8, 1, 9, 2 (seq 0 to 5), and
	// then the heap is drained; want is the keys in the order they came
	// out, those the step took out first.
	tests := []struct {
		name string
		step func(h *Heap[*item, byKey], items []*item)
		want []int
	}{
		{"drain", func(*Heap[*item, byKey], []*item) {}, []int{1, 2, 3, 5, 8, 9}},
		{"fix down", func(h *Heap[*item, byKey], it []*item) { it[3].key = 7; h.Fix(it[3].idx) }, []int{2, 3, 5, 7, 8, 9}},
		{"fix up", func(h *Heap[*item, byKey], it []*item) { it[4].key = 0; h.Fix(it[4].idx) }, []int{0, 1, 2, 3, 5, 8}},
		{"fix unchanged", func(h *Heap[*item, byKey], it []*item) { h.Fix(it[2].idx) }, []int{1, 2, 3, 5, 8, 9}},
		{"remove middle", func(h *Heap[*item, byKey], it []*item) {
			if x := h.Remove(it[0].idx); x != it[0] || x.idx != -1 {
				t.Errorf("removed %+v, want key 5 with index -1", x)
			}
		}, []int{1, 2, 3, 8, 9}},
		{"remove top", func(h *Heap[*item, byKey], it []*item) { h.Remove(0) }, []int{2, 3, 5, 8, 9}},
		{"remove last", func(h *Heap[*item, byKey], it []*item) { h.Remove(h.Len() - 1) }, []int{1, 2, 3, 5, 9}},
		{"ties by seq", func(h *Heap[*item, byKey], it []*item) { h.Push(&item{key: 1, seq: 6}) }, []int{1, 1, 2, 3, 5, 8, 9}},
		{"reset", func(h *Heap[*item, byKey], it []*item) { h.Reset() }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Heap[*item, byKey]
			var items []*item
			for i, k := range []int{5, 3, 8, 1, 9, 2} {
				items = append(items, &item{key: k, seq: i})
				h.Push(items[i])
			}
			checkIndexes(t, &h)
			tt.step(&h, items)
			checkIndexes(t, &h)
			var got []int
			for h.Len() > 0 {
				min := h.At(0)
				x := h.Pop()
				if x != min || x.idx != -1 {
					t.Fatalf("popped %+v, want the least, %+v, with index -1", x, min)
				}
				got = append(got, x.key)
				checkIndexes(t, &h)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("drained %v, want %v", got, tt.want)
			}
		})
	}
}

// stdItems is the same heap on container/heap, as the turn queues had it.
type stdItems []*item

func (s stdItems) Len() int           { return len(s) }
func (s stdItems) Less(i, j int) bool { return byKey{}.Less(s[i], s[j]) }
func (s stdItems) Swap(i, j int) {
	s[i], s[j] = s[j], s[i]
	s[i].idx, s[j].idx = i, j
}
func (s *stdItems) Push(x any) {
	x.(*item).idx = len(*s)
	*s = append(*s, x.(*item))
}
func (s *stdItems) Pop() any {
	old := *s
	x := old[len(old)-1]
	*s = old[:len(old)-1]
	x.idx = -1
	return x
}

// TestSameAsContainerHeap runs one random sequence of operations on a Heap
// and on container/heap, with many equal keys, and requires the same
// element at every index after each: the heaps moved onto this package
// keep the order of their ties.
func TestSameAsContainerHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var h Heap[*item, byKey]
	var s stdItems
	var ours, theirs []*item // the live elements of each, in step
	for step := range 20000 {
		switch op := rng.IntN(5); {
		case op <= 1 || len(ours) == 0:
			k := rng.IntN(10)
			a, b := &item{key: k}, &item{key: k}
			h.Push(a)
			stdheap.Push(&s, b)
			ours, theirs = append(ours, a), append(theirs, b)
		case op == 2:
			a, b := h.Pop(), stdheap.Pop(&s).(*item)
			i := slices.Index(ours, a)
			if theirs[i] != b {
				t.Fatalf("step %d: popped different elements", step)
			}
			ours, theirs = slices.Delete(ours, i, i+1), slices.Delete(theirs, i, i+1)
		case op == 3:
			i := rng.IntN(len(ours))
			k := rng.IntN(10)
			ours[i].key, theirs[i].key = k, k
			h.Fix(ours[i].idx)
			stdheap.Fix(&s, theirs[i].idx)
		default:
			i := rng.IntN(len(ours))
			h.Remove(ours[i].idx)
			stdheap.Remove(&s, theirs[i].idx)
			ours, theirs = slices.Delete(ours, i, i+1), slices.Delete(theirs, i, i+1)
		}
		for j := range h.Len() {
			if i := slices.Index(ours, h.At(j)); theirs[i] != s[j] {
				t.Fatalf("step %d: index %d holds different elements", step, j)
			}
		}
	}
	checkIndexes(t, &h)
}

// TestHeapAllocs: at a steady size, pushes, pops and fixes allocate
// nothing, as the turn queues' admission path requires.
func TestHeapAllocs(t *testing.T) {
	var h Heap[*item, byKey]
	items := make([]*item, 256)
	for i := range items {
		items[i] = &item{key: i * 7 % 256, seq: i}
		h.Push(items[i])
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		x := h.Pop()
		x.key += 3
		h.Push(x)
		y := items[i%len(items)]
		y.key -= 5
		h.Fix(y.idx)
		h.Push(h.Remove(y.idx))
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations a step, want 0", allocs)
	}
}

// candidate is a value element that does not track its index, as the BPE
// merge queue's.
type candidate struct {
	rank uint32
	pos  int32
}

type byRank struct{}

func (byRank) Less(a, b candidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}
func (byRank) SetIndex(candidate, int) {}

func TestValueHeap(t *testing.T) {
	var h Heap[candidate, byRank]
	in := []candidate{{5, 1}, {2, 9}, {2, 3}, {7, 0}, {1, 4}}
	for _, c := range in {
		h.Push(c)
	}
	var got []candidate
	for h.Len() > 0 {
		got = append(got, h.Pop())
	}
	want := []candidate{{1, 4}, {2, 3}, {2, 9}, {5, 1}, {7, 0}}
	if !slices.Equal(got, want) {
		t.Errorf("drained %v, want %v", got, want)
	}
	if h.Cap() < len(in) {
		t.Errorf("Cap %d after %d pushes", h.Cap(), len(in))
	}
}

func BenchmarkPushPop(b *testing.B) {
	var h Heap[*item, byKey]
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1024 {
		h.Push(&item{key: rng.IntN(1 << 20), seq: i})
	}
	b.ReportAllocs()
	for b.Loop() {
		x := h.Pop()
		x.key += rng.IntN(1 << 10)
		h.Push(x)
	}
}

func BenchmarkPushPopContainerHeap(b *testing.B) {
	var s stdItems
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1024 {
		stdheap.Push(&s, &item{key: rng.IntN(1 << 20), seq: i})
	}
	b.ReportAllocs()
	for b.Loop() {
		x := stdheap.Pop(&s).(*item)
		x.key += rng.IntN(1 << 10)
		stdheap.Push(&s, x)
	}
}

func BenchmarkFix(b *testing.B) {
	var h Heap[*item, byKey]
	rng := rand.New(rand.NewPCG(1, 2))
	items := make([]*item, 1024)
	for i := range items {
		items[i] = &item{key: rng.IntN(1 << 20), seq: i}
		h.Push(items[i])
	}
	b.ReportAllocs()
	for b.Loop() {
		x := items[rng.IntN(len(items))]
		x.key = rng.IntN(1 << 20)
		h.Fix(x.idx)
	}
}

func BenchmarkValuePushPop(b *testing.B) {
	var h Heap[candidate, byRank]
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1024 {
		h.Push(candidate{rank: rng.Uint32N(1 << 20), pos: int32(i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		c := h.Pop()
		c.rank += rng.Uint32N(1 << 10)
		h.Push(c)
	}
}
