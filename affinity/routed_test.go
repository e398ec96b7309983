package affinity

import (
	"math"
	"testing"
)

func TestRoutedLoad(t *testing.T) {
	r := NewRoutedLoad(4) // each pick keeps 3/4 of every total
	r.Add(0, 100)
	r.Add(2, 100)
	r.Add(-1, 50) // ignored
	r.Add(1, 0)   // ignored
	for ep, want := range []float64{75, 0, 100, 0} {
		if got := r.Tokens(ep); math.Abs(got-want) > 1e-9 {
			t.Errorf("endpoint %d: %v tokens, want %v", ep, got, want)
		}
	}

	reg := newFleet(t, 3)
	scores := make([]float64, 3)
	(&RoutedTokens{Load: r}).Score(&Cycle{}, reg.Endpoints(), scores)
	if want := []float64{0.25, 1, 0}; !near(scores, want) {
		t.Errorf("routed-tokens scores = %v, want %v", scores, want)
	}
	(&RoutedTokens{Load: NewRoutedLoad(4)}).Score(&Cycle{}, reg.Endpoints(), scores)
	if want := []float64{1, 1, 1}; !near(scores, want) {
		t.Errorf("routed-tokens scores with nothing routed = %v, want %v", scores, want)
	}
}

func TestRoutedLoadAllocs(t *testing.T) {
	r := NewRoutedLoad(DefaultRoutedWindow)
	r.Add(3, 1)
	if n := testing.AllocsPerRun(100, func() { r.Add(2, 1000) }); n != 0 {
		t.Errorf("Add allocates %v times, want 0", n)
	}
}
