package affinity

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/turnpike-gateway/turnpike/pools"
)

// fixedScorer scores candidate i with s[ep.Index].
type fixedScorer struct {
	name string
	s    []float64
}

func (f *fixedScorer) Name() string { return f.name }
func (f *fixedScorer) Score(_ *Cycle, candidates []*pools.Endpoint, scores []float64) {
	for i, ep := range candidates {
		scores[i] = f.s[ep.Index]
	}
}

// recordingPicker remembers the scores it was given and picks the first.
type recordingPicker struct{ got []float64 }

func (*recordingPicker) Name() string { return "recording" }
func (r *recordingPicker) Pick(_ *Cycle, _ []*pools.Endpoint, scores []float64) int {
	r.got = slices.Clone(scores)
	return 0
}

// dropIndex drops one endpoint by Index.
type dropIndex int

func (dropIndex) Name() string { return "drop" }
func (d dropIndex) Filter(_ *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint {
	return keep(candidates, func(ep *pools.Endpoint) bool { return ep.Index != int(d) })
}

func TestPipelineClampsAndWeights(t *testing.T) {
	reg := newFleet(t, 4)
	picker := &recordingPicker{}
	p := NewPipeline(
		[]Filter{dropIndex(3)},
		[]WeightedScorer{
			{&fixedScorer{"a", []float64{-1, 0.5, 2, 0}}, 3},
			{&fixedScorer{"b", []float64{1, math.NaN(), 0.25, 0}}, 1},
			{&fixedScorer{"off", []float64{1, 1, 1, 1}}, 0},
		},
		picker, PipelineOptions{})
	candidates := slices.Clone(reg.Endpoints())
	ep, err := p.Run(context.Background(), &Request{}, candidates)
	if err != nil {
		t.Fatal(err)
	}
	// a is clamped to 0, 0.5, 1; b to 1, 0, 0.25; weighted 3:1 over 4.
	want := []float64{(3*0 + 1) / 4.0, (3*0.5 + 0) / 4.0, (3*1 + 0.25) / 4.0}
	if !slices.Equal(picker.got, want) {
		t.Errorf("scores = %v, want %v", picker.got, want)
	}
	if ep != reg.Endpoints()[0] {
		t.Errorf("picked %s, want the picker's choice", ep.ID)
	}
	if !slices.Equal(candidates, reg.Endpoints()) {
		t.Error("the pipeline changed the caller's candidates")
	}
}

func TestPipelineNoEndpoint(t *testing.T) {
	reg := newFleet(t, 2)
	for _, ep := range reg.Endpoints() {
		ep.SetHealthy(false)
	}
	p := NewPipeline([]Filter{Healthy{}}, nil, &MaxScore{Rand: seqRand(1)}, PipelineOptions{})
	if _, err := p.Run(context.Background(), &Request{}, reg.Endpoints()); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("err = %v, want ErrNoEndpoint", err)
	}
}

func TestClamp01(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{
		{-0.5, 0}, {0, 0}, {0.3, 0.3}, {1, 1}, {7, 1}, {math.NaN(), 0}, {math.Inf(1), 1}, {math.Inf(-1), 0},
	} {
		if got := clamp01(tc.in); got != tc.want {
			t.Errorf("clamp01(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
