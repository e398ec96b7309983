package affinity

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

func TestInteractiveLane(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	lane := InteractiveLane{Endpoints: 1, MinFleet: 4, Hold: 30 * time.Second, Now: clock, lastInteractive: new(atomic.Int64)}
	reg := newFleet(t, 5)
	run := func(interactive bool, eps []*pools.Endpoint) []int {
		c := &Cycle{Request: &Request{Interactive: interactive}}
		var got []int
		for _, ep := range lane.Filter(c, append([]*pools.Endpoint(nil), eps...)) {
			got = append(got, ep.Index)
		}
		return got
	}
	same := func(a, b []int) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	steps := []struct {
		name        string
		advance     time.Duration
		interactive bool
		eps         []*pools.Endpoint
		want        []int
	}{
		{"no interactive traffic: everyone everywhere", 0, false, reg.Endpoints(), []int{0, 1, 2, 3, 4}},
		{"an interactive turn takes the lane", 0, true, reg.Endpoints(), []int{0}},
		{"then other turns keep off it", time.Second, false, reg.Endpoints(), []int{1, 2, 3, 4}},
		{"the lane follows the lowest available index", 0, true, reg.Endpoints()[1:], []int{1}},
		{"too small a fleet gets no lane", 0, false, reg.Endpoints()[:3], []int{0, 1, 2}},
		{"still held just before Hold", 29 * time.Second, false, reg.Endpoints(), []int{1, 2, 3, 4}},
		{"released after Hold without interactive turns", 2 * time.Second, false, reg.Endpoints(), []int{0, 1, 2, 3, 4}},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		if got := run(s.interactive, s.eps); !same(got, s.want) {
			t.Errorf("%s: kept %v, want %v", s.name, got, s.want)
		}
	}
	off := InteractiveLane{Endpoints: 0, MinFleet: 4, Hold: time.Minute, Now: clock, lastInteractive: new(atomic.Int64)}
	if got := off.Filter(&Cycle{Request: &Request{Interactive: true}}, append([]*pools.Endpoint(nil), reg.Endpoints()...)); len(got) != 5 {
		t.Errorf("a disabled lane filtered: %d left", len(got))
	}
}
