package lru

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// order returns l's values front to back, checking the links both ways.
func order(t testing.TB, l *List[int]) []int {
	t.Helper()
	var got []int
	prev := Node(0)
	for n := l.Front(); n != 0; n = l.Next(n) {
		if l.Prev(n) != prev {
			t.Fatalf("node %d: prev %d, want %d", n, l.Prev(n), prev)
		}
		got = append(got, *l.Value(n))
		prev = n
	}
	if l.Back() != prev {
		t.Fatalf("back %d, want %d", l.Back(), prev)
	}
	if len(got) != l.Len() {
		t.Fatalf("%d nodes linked, Len %d", len(got), l.Len())
	}
	return got
}

func TestList(t *testing.T) {
	// Each step runs on a list where value v was pushed as node v (the
	// first five pushes, values 1 to 5, pushed in order: 5 is the front).
	tests := []struct {
		name string
		step func(l *List[int])
		want []int
	}{
		{"pushed", func(*List[int]) {}, []int{5, 4, 3, 2, 1}},
		{"move back to front", func(l *List[int]) { l.MoveToFront(1) }, []int{1, 5, 4, 3, 2}},
		{"move front to front", func(l *List[int]) { l.MoveToFront(5) }, []int{5, 4, 3, 2, 1}},
		{"move after", func(l *List[int]) { l.MoveAfter(1, 4) }, []int{5, 4, 1, 3, 2}},
		{"move after itself", func(l *List[int]) { l.MoveAfter(3, 3) }, []int{5, 4, 3, 2, 1}},
		{"move after the back", func(l *List[int]) { l.MoveAfter(5, 1) }, []int{4, 3, 2, 1, 5}},
		{"insert after", func(l *List[int]) { l.InsertAfter(9, 3) }, []int{5, 4, 3, 9, 2, 1}},
		{"insert after the back", func(l *List[int]) { l.InsertAfter(9, l.Back()) }, []int{5, 4, 3, 2, 1, 9}},
		{"remove middle", func(l *List[int]) { l.Remove(3) }, []int{5, 4, 2, 1}},
		{"remove front and back", func(l *List[int]) { l.Remove(l.Front()); l.Remove(l.Back()) }, []int{4, 3, 2}},
		{"remove all", func(l *List[int]) {
			for l.Len() > 0 {
				l.Remove(l.Back())
			}
		}, nil},
		{"reset", func(l *List[int]) { l.Reset() }, nil},
		{"reset and push", func(l *List[int]) { l.Reset(); l.PushFront(7); l.PushFront(8) }, []int{8, 7}},
		{"freed node reused", func(l *List[int]) {
			l.Remove(2)
			if n := l.PushFront(6); n != 2 {
				t.Errorf("push after remove of node 2: node %d", n)
			}
		}, []int{6, 5, 4, 3, 1}},
		{"value in place", func(l *List[int]) { *l.Value(4) = 40 }, []int{5, 40, 3, 2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l List[int]
			for v := 1; v <= 5; v++ {
				if n := l.PushFront(v); n != Node(v) {
					t.Fatalf("push %d: node %d", v, n)
				}
			}
			tt.step(&l)
			if got := order(t, &l); !slices.Equal(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
		})
	}
}

func TestListZero(t *testing.T) {
	var l List[string]
	if l.Len() != 0 || l.Front() != 0 || l.Back() != 0 {
		t.Fatalf("zero list: len %d, front %d, back %d", l.Len(), l.Front(), l.Back())
	}
	l.Reset()
	if n := l.PushFront("a"); n != 1 || l.Front() != 1 || l.Back() != 1 {
		t.Fatalf("first push: node %d, front %d, back %d", n, l.Front(), l.Back())
	}
	if v := l.Remove(1); v != "a" || l.Len() != 0 || l.Front() != 0 {
		t.Fatalf("remove: %q, len %d, front %d", v, l.Len(), l.Front())
	}
}

// TestListRandom runs random operations on a List and on a slice that
// does the same the obvious way, and compares them.
func TestListRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var l List[int]
	var model []int      // values front to back
	at := map[int]Node{} // value → node
	next := 0
	for range 20000 {
		switch op := rng.IntN(6); {
		case op == 0 || len(model) == 0:
			next++
			at[next] = l.PushFront(next)
			model = slices.Insert(model, 0, next)
		case op == 1:
			i := rng.IntN(len(model))
			next++
			at[next] = l.InsertAfter(next, at[model[i]])
			model = slices.Insert(model, i+1, next)
		case op == 2:
			i := rng.IntN(len(model))
			v := model[i]
			l.MoveToFront(at[v])
			model = slices.Insert(slices.Delete(model, i, i+1), 0, v)
		case op == 3:
			i, j := rng.IntN(len(model)), rng.IntN(len(model))
			v, w := model[i], model[j]
			l.MoveAfter(at[v], at[w])
			if i != j {
				model = slices.Delete(model, i, i+1)
				k := slices.Index(model, w)
				model = slices.Insert(model, k+1, v)
			}
		default:
			i := rng.IntN(len(model))
			v := model[i]
			if got := l.Remove(at[v]); got != v {
				t.Fatalf("remove %d: got %d", v, got)
			}
			delete(at, v)
			model = slices.Delete(model, i, i+1)
		}
	}
	if got := order(t, &l); !slices.Equal(got, model) {
		t.Fatalf("order %v, want %v", got, model)
	}
}

// TestListAllocs: a list held at its bound allocates nothing, as the KV
// index's tiers are on every routed turn.
func TestListAllocs(t *testing.T) {
	var l List[[4]uint64]
	l.Grow(1024)
	for i := range 1024 {
		l.PushFront([4]uint64{uint64(i)})
	}
	allocs := testing.AllocsPerRun(1000, func() {
		l.Remove(l.Back())
		n := l.PushFront([4]uint64{1})
		l.InsertAfter([4]uint64{2}, n)
		l.MoveToFront(l.Back())
		l.MoveAfter(l.Front(), l.Back())
		l.Remove(l.Back())
	})
	if allocs != 0 {
		t.Errorf("%v allocations a churn at the bound, want 0", allocs)
	}
	var g List[int]
	g.Grow(100)
	if allocs := testing.AllocsPerRun(10, func() {
		for i := range 100 {
			g.PushFront(i)
		}
		g.Reset()
	}); allocs != 0 {
		t.Errorf("%v allocations pushing into grown room, want 0", allocs)
	}
}

func BenchmarkListChurn(b *testing.B) {
	var l List[[4]uint64]
	for i := range 1 << 16 {
		l.PushFront([4]uint64{uint64(i)})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.Remove(l.Back())
		l.PushFront([4]uint64{uint64(i)})
	}
}

func BenchmarkListMoveToFront(b *testing.B) {
	var l List[[4]uint64]
	const n = 1 << 16
	for i := range n {
		l.PushFront([4]uint64{uint64(i)})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		l.MoveToFront(Node(1 + rng.IntN(n)))
	}
}
