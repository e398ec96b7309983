package lru

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// keys returns c's keys, most recent first.
func keys[V any](c *Cache[string, V]) []string {
	var got []string
	for n := c.list.Front(); n != 0; n = c.list.Next(n) {
		got = append(got, c.list.Value(n).key)
	}
	return got
}

func TestCache(t *testing.T) {
	byLen := func(k, v string) int64 { return int64(len(k) + len(v)) }
	// A script is a space-separated list of steps: +k=v adds (its
	// evictions are shown as !n after it when there are any), ?k gets,
	// .k peeks, -k removes, < removes the oldest. Gets, peeks and removes
	// show what they found; the result is the cache's keys, most recent
	// first, and its cost.
	tests := []struct {
		name     string
		capacity int64
		cost     func(k, v string) int64
		script   string
		want     string
	}{
		{"unbounded", 0, nil, "+a=1 +b=2 +c=3", "| c b a | 3"},
		{"evicts the least recent", 2, nil, "+a=1 +b=2 +c=3", "!1 | c b | 2"},
		{"get marks recent", 2, nil, "+a=1 +b=2 ?a +c=3", "?a=1 !1 | c a | 2"},
		{"peek does not", 2, nil, "+a=1 +b=2 .a +c=3", ".a=1 !1 | c b | 2"},
		{"miss", 2, nil, "?x .x -x <", "?x- .x- -x- <- | | 0"},
		{"replace marks recent", 2, nil, "+a=1 +b=2 +a=9 +c=3 ?a", "!1 ?a=9 | a c | 2"},
		{"remove", 3, nil, "+a=1 +b=2 +c=3 -b +d=4", "-b=2 | d c a | 3"},
		{"remove oldest", 3, nil, "+a=1 +b=2 +c=3 ?a <", "?a=1 <b=2 | a c | 2"},
		{"by cost", 6, byLen, "+a=1 +b=2 +c=3 +dd=44", "!2 | dd c | 6"},
		{"replace changes cost", 6, byLen, "+a=1 +b=2 +c=3 +a=111", "!1 | a c | 6"},
		{"too costly alone", 3, byLen, "+a=1 +bb=22", "!2 | | 0"},
		{"cost of removed", 0, byLen, "+a=1 +bb=22 -a", "-a=1 | bb | 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCache[string, string](tt.capacity, tt.cost)
			var out []string
			show := func(op, k, v string, ok bool) {
				if ok {
					out = append(out, op+k+"="+v)
				} else {
					out = append(out, op+k+"-")
				}
			}
			for _, step := range strings.Fields(tt.script) {
				op, arg := step[:1], step[1:]
				k, v, _ := strings.Cut(arg, "=")
				switch op {
				case "+":
					if n := c.Add(k, v); n > 0 {
						out = append(out, fmt.Sprintf("!%d", n))
					}
				case "?":
					v, ok := c.Get(k)
					show(op, k, v, ok)
				case ".":
					v, ok := c.Peek(k)
					show(op, k, v, ok)
				case "-":
					v, ok := c.Remove(k)
					show(op, k, v, ok)
				case "<":
					k, v, ok := c.RemoveOldest()
					show(op, k, v, ok)
				}
			}
			out = append(out, "|")
			out = append(out, keys(c)...)
			out = append(out, "|", fmt.Sprint(c.Cost()))
			if got := strings.Join(out, " "); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if c.Len() != len(c.index) {
				t.Errorf("Len %d, index %d", c.Len(), len(c.index))
			}
		})
	}
}

func TestCacheZero(t *testing.T) {
	var c Cache[int, int]
	if _, _, ok := c.Oldest(); ok {
		t.Fatal("zero cache has an oldest entry")
	}
	for i := range 100 {
		if n := c.Add(i, i); n != 0 {
			t.Fatalf("zero cache evicted %d", n)
		}
	}
	if k, v, ok := c.Oldest(); !ok || k != 0 || v != 0 {
		t.Fatalf("oldest %d=%d %v, want 0=0", k, v, ok)
	}
	if c.Len() != 100 || c.Cost() != 100 {
		t.Fatalf("len %d cost %d, want 100 100", c.Len(), c.Cost())
	}
}

// TestCacheRandom compares a Cache with a slice kept in order the obvious
// way.
func TestCacheRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const capacity = 50
	c := NewCache[string, int](capacity, nil)
	var model []string // most recent first
	vals := map[string]int{}
	for i := range 20000 {
		k := fmt.Sprint(rng.IntN(80))
		idx := slices.Index(model, k)
		switch rng.IntN(4) {
		case 0, 1:
			c.Add(k, i)
			if idx >= 0 {
				model = slices.Delete(model, idx, idx+1)
			}
			model = slices.Insert(model, 0, k)
			vals[k] = i
			if len(model) > capacity {
				model = model[:capacity]
			}
		case 2:
			v, ok := c.Get(k)
			if ok != (idx >= 0) || ok && v != vals[k] {
				t.Fatalf("get %s: %d %v, model has it at %d", k, v, ok, idx)
			}
			if ok {
				model = slices.Insert(slices.Delete(model, idx, idx+1), 0, k)
			}
		case 3:
			_, ok := c.Remove(k)
			if ok != (idx >= 0) {
				t.Fatalf("remove %s: %v, model has it at %d", k, ok, idx)
			}
			if ok {
				model = slices.Delete(model, idx, idx+1)
			}
		}
	}
	if got := keys(c); !slices.Equal(got, model) {
		t.Fatalf("keys %v\nwant %v", got, model)
	}
}

// TestCacheAllocs: a hit, and an add that evicts at the bound, allocate
// nothing.
func TestCacheAllocs(t *testing.T) {
	const n = 1024
	c := NewCache[uint64, uint64](n, nil)
	for i := range uint64(n) {
		c.Add(i, i)
	}
	if allocs := testing.AllocsPerRun(1000, func() {
		c.Get(7)
		c.Peek(8)
		c.Add(7, 1)
	}); allocs != 0 {
		t.Errorf("%v allocations a hit, want 0", allocs)
	}
	next := uint64(n)
	if allocs := testing.AllocsPerRun(1000, func() {
		c.Add(next, next)
		next++
	}); allocs != 0 {
		t.Errorf("%v allocations an add at the bound, want 0", allocs)
	}
}

func BenchmarkCacheGet(b *testing.B) {
	const n = 1 << 16
	c := NewCache[uint64, uint64](n, nil)
	for i := range uint64(n) {
		c.Add(i, i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		c.Get(rng.Uint64N(n))
	}
}

func BenchmarkCacheAddEvict(b *testing.B) {
	const n = 1 << 16
	c := NewCache[uint64, uint64](n, nil)
	b.ReportAllocs()
	for i := uint64(0); b.Loop(); i++ {
		c.Add(i, i)
	}
}

func TestCacheAll(t *testing.T) {
	c := NewCache[string, int](0, nil)
	c.Add("a", 1)
	c.Add("b", 2)
	c.Add("c", 3)
	c.Get("a")
	var got []string
	for k, v := range c.All() {
		got = append(got, fmt.Sprint(k, v))
	}
	if want := []string{"a1", "c3", "b2"}; !slices.Equal(got, want) {
		t.Errorf("All: %v, want %v (most recent first)", got, want)
	}
}
