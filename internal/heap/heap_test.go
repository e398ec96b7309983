package heap

import (
	stdheap "container/heap"
	"math/rand/v2"
	"slices"
	"testing"
)

// item is an element that knows its index, as the turn queues' do.
type item struct {
	key float64
	seq uint64
	idx int
}

func newItems() Heap[float64, *item] {
	return NewIndexed[float64](func(x *item, i int) { x.idx = i })
}

func push(h *Heap[float64, *item], x *item) { h.Push(x, x.key, x.seq) }

func fix(h *Heap[float64, *item], x *item) { h.Fix(x.idx, x.key, x.seq) }

// checkIndexes fails unless every element knows its index and the heap
// property holds.
func checkIndexes(t testing.TB, h *Heap[float64, *item]) {
	t.Helper()
	for i := range h.Len() {
		if h.At(i).idx != i {
			t.Fatalf("element at %d says %d", i, h.At(i).idx)
		}
		if p := (i - 1) / 2; i > 0 && h.items[i].less(&h.items[p]) {
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
		step func(h *Heap[float64, *item], items []*item)
		want []float64
	}{
		{"drain", func(*Heap[float64, *item], []*item) {}, []float64{1, 2, 3, 5, 8, 9}},
		{"fix down", func(h *Heap[float64, *item], it []*item) { it[3].key = 7; fix(h, it[3]) }, []float64{2, 3, 5, 7, 8, 9}},
		{"fix up", func(h *Heap[float64, *item], it []*item) { it[4].key = 0; fix(h, it[4]) }, []float64{0, 1, 2, 3, 5, 8}},
		{"fix unchanged", func(h *Heap[float64, *item], it []*item) { fix(h, it[2]) }, []float64{1, 2, 3, 5, 8, 9}},
		{"remove middle", func(h *Heap[float64, *item], it []*item) {
			if x := h.Remove(it[0].idx); x != it[0] || x.idx != -1 {
				t.Errorf("removed %+v, want key 5 with index -1", x)
			}
		}, []float64{1, 2, 3, 8, 9}},
		{"remove top", func(h *Heap[float64, *item], it []*item) { h.Remove(0) }, []float64{2, 3, 5, 8, 9}},
		{"remove last", func(h *Heap[float64, *item], it []*item) { h.Remove(h.Len() - 1) }, []float64{1, 2, 3, 5, 9}},
		{"negative keys", func(h *Heap[float64, *item], it []*item) { it[5].key = -2; fix(h, it[5]) }, []float64{-2, 1, 3, 5, 8, 9}},
		{"reset", func(h *Heap[float64, *item], it []*item) { h.Reset() }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newItems()
			var items []*item
			for i, k := range []float64{5, 3, 8, 1, 9, 2} {
				items = append(items, &item{key: k, seq: uint64(i)})
				push(&h, items[i])
			}
			checkIndexes(t, &h)
			tt.step(&h, items)
			checkIndexes(t, &h)
			var got []float64
			for h.Len() > 0 {
				least := h.At(0)
				x := h.Pop()
				if x != least || x.idx != -1 {
					t.Fatalf("popped %+v, want the least, %+v, with index -1", x, least)
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

func TestTies(t *testing.T) {
	// Equal keys come out by tie, whatever the order they went in.
	var h Heap[int, string]
	for _, x := range []struct {
		s   string
		key int
		tie uint64
	}{{"c", 1, 3}, {"z", 2, 0}, {"a", 1, 1}, {"b", 1, 2}} {
		h.Push(x.s, x.key, x.tie)
	}
	var got []string
	for h.Len() > 0 {
		got = append(got, h.Pop())
	}
	if want := []string{"a", "b", "c", "z"}; !slices.Equal(got, want) {
		t.Errorf("drained %v, want %v", got, want)
	}
}

// stdItems is the same heap on container/heap, as the turn queues had it.
type stdItems []*item

func (s stdItems) Len() int { return len(s) }
func (s stdItems) Less(i, j int) bool {
	if s[i].key != s[j].key {
		return s[i].key < s[j].key
	}
	return s[i].seq < s[j].seq
}
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
// and on container/heap, with many equal keys and ties, and requires the
// same element at every index after each: the heaps moved onto this
// package keep the order of their ties.
func TestSameAsContainerHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	h := newItems()
	var s stdItems
	var ours, theirs []*item // the live elements of each, in step
	for step := range 20000 {
		switch op := rng.IntN(5); {
		case op <= 1 || len(ours) == 0:
			k, q := float64(rng.IntN(10)), rng.Uint64N(3)
			a, b := &item{key: k, seq: q}, &item{key: k, seq: q}
			push(&h, a)
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
			k := float64(rng.IntN(10))
			ours[i].key, theirs[i].key = k, k
			fix(&h, ours[i])
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

// TestHeapAllocs: at a steady size, pushes, pops, fixes and removes
// allocate nothing, as the turn queues' admission path requires.
func TestHeapAllocs(t *testing.T) {
	h := newItems()
	items := make([]*item, 256)
	for i := range items {
		items[i] = &item{key: float64(i * 7 % 256), seq: uint64(i)}
		push(&h, items[i])
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		x := h.Pop()
		x.key += 3
		push(&h, x)
		y := items[i%len(items)]
		y.key -= 5
		fix(&h, y)
		push(&h, h.Remove(y.idx))
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations a step, want 0", allocs)
	}
}

// candidate is a value element that does not track its index, as the BPE
// merge queue's.
type candidate struct {
	pos int32
}

func TestValueHeap(t *testing.T) {
	var h Heap[uint32, candidate]
	in := []struct {
		rank uint32
		pos  int32
	}{{5, 1}, {2, 9}, {2, 3}, {7, 0}, {1, 4}}
	for _, c := range in {
		h.Push(candidate{pos: c.pos}, c.rank, uint64(c.pos))
	}
	var got []int32
	for h.Len() > 0 {
		got = append(got, h.Pop().pos)
	}
	if want := []int32{4, 3, 9, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("drained positions %v, want %v", got, want)
	}
	if h.Cap() < len(in) {
		t.Errorf("Cap %d after %d pushes", h.Cap(), len(in))
	}
}

func BenchmarkPushPop(b *testing.B) {
	h := newItems()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1024 {
		push(&h, &item{key: float64(rng.IntN(1 << 20)), seq: uint64(i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		x := h.Pop()
		x.key += float64(rng.IntN(1 << 10))
		push(&h, x)
	}
}

func BenchmarkPushPopContainerHeap(b *testing.B) {
	var s stdItems
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1024 {
		stdheap.Push(&s, &item{key: float64(rng.IntN(1 << 20)), seq: uint64(i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		x := stdheap.Pop(&s).(*item)
		x.key += float64(rng.IntN(1 << 10))
		stdheap.Push(&s, x)
	}
}

func BenchmarkFix(b *testing.B) {
	h := newItems()
	rng := rand.New(rand.NewPCG(1, 2))
	items := make([]*item, 1024)
	for i := range items {
		items[i] = &item{key: float64(rng.IntN(1 << 20)), seq: uint64(i)}
		push(&h, items[i])
	}
	b.ReportAllocs()
	for b.Loop() {
		x := items[rng.IntN(len(items))]
		x.key = float64(rng.IntN(1 << 20))
		fix(&h, x)
	}
}

func BenchmarkValuePushPop(b *testing.B) {
	var h Heap[uint32, candidate]
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1024 {
		h.Push(candidate{pos: int32(i)}, rng.Uint32N(1<<20), uint64(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		c := h.Pop()
		h.Push(c, rng.Uint32N(1<<20), uint64(c.pos))
	}
}
