package affinity

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/pools"
)

// WeightedScorer is a scorer with its weight in the pipeline.
type WeightedScorer struct {
	Scorer
	Weight float64
}

// Pipeline runs filters, weighted scorers and a picker over the candidates
// of one request, then the load guard. It owns what plugins must not do
// themselves: clamping scores to [0, 1], weighting them, and timing each
// plugin. A Pipeline is immutable once built and safe for concurrent use.
type Pipeline struct {
	filters []timed[Filter]
	scorers []timed[WeightedScorer]
	picker  timed[Picker]
	// guard is nil when the load guard is off.
	guard *LoadGuard
	// weightSum normalises the weighted sum back into [0, 1].
	weightSum float64

	// sampleEvery and tick choose the requests whose plugins are timed.
	sampleEvery uint64
	tick        atomic.Uint64
}

// timed is a plugin with the observer of its latency; obs is nil when
// metrics are off.
type timed[P any] struct {
	p   P
	obs prometheus.Observer
}

// PipelineOptions are the parts of a Pipeline beside its plugins.
type PipelineOptions struct {
	// Guard is the load guard; nil turns it off.
	Guard *LoadGuard
	// Latency observes each plugin's latency, in seconds, labelled by
	// plugin name; nil times nothing.
	Latency *prometheus.HistogramVec
	// SampleEvery times the plugins of one run in this many; zero or one
	// times every run.
	SampleEvery int
}

// NewPipeline builds a pipeline. Scorer weights must be finite and ≥ 0.
func NewPipeline(filters []Filter, scorers []WeightedScorer, picker Picker, opts PipelineOptions) *Pipeline {
	p := &Pipeline{guard: opts.Guard, sampleEvery: uint64(max(opts.SampleEvery, 1))}
	obs := func(name string) prometheus.Observer {
		if opts.Latency == nil {
			return nil
		}
		return opts.Latency.WithLabelValues(name)
	}
	for _, f := range filters {
		p.filters = append(p.filters, timed[Filter]{f, obs(f.Name())})
	}
	for _, s := range scorers {
		if !(s.Weight >= 0) || math.IsInf(s.Weight, 0) {
			panic("affinity: scorer weight must be finite and ≥ 0")
		}
		p.scorers = append(p.scorers, timed[WeightedScorer]{s, obs(s.Name())})
		p.weightSum += s.Weight
	}
	p.picker = timed[Picker]{picker, obs(picker.Name())}
	return p
}

// cyclePool recycles Cycles, and with them the per-request slices, so that
// a warm Pick does not allocate.
var cyclePool = sync.Pool{New: func() any { return new(Cycle) }}

// newCycle takes a Cycle from the pool for req over a copy of candidates.
func newCycle(req *Request, candidates []*pools.Endpoint, now time.Time) *Cycle {
	c := cyclePool.Get().(*Cycle)
	c.Request, c.Now = req, now
	c.all = append(c.all[:0], candidates...)
	c.candidates = c.all
	return c
}

// release returns c to the pool. The caller must not use c afterwards.
func (c *Cycle) release() {
	c.reset()
	cyclePool.Put(c)
}

// sampled reports whether this run's plugins are timed.
func (p *Pipeline) sampled() bool {
	return p.picker.obs != nil && p.tick.Add(1)%p.sampleEvery == 0
}

// since observes the time from start on obs, when timing.
func since(obs prometheus.Observer, timing bool, start time.Time) {
	if timing {
		obs.Observe(time.Since(start).Seconds())
	}
}

func now(timing bool) time.Time {
	if timing {
		return time.Now()
	}
	return time.Time{}
}

// run filters, scores and picks among c.candidates, then applies the load
// guard; timing says whether to time the plugins (see sampled). It leaves the pick in c and returns the endpoint.
func (p *Pipeline) run(_ context.Context, c *Cycle, timing bool) (*pools.Endpoint, error) {
	for _, f := range p.filters {
		start := now(timing)
		c.candidates = f.p.Filter(c, c.candidates)
		since(f.obs, timing, start)
		if len(c.candidates) == 0 {
			return nil, ErrNoEndpoint
		}
	}
	n := len(c.candidates)
	c.total = grow(c.total, n)
	c.raw = grow(c.raw, n)
	clear(c.total)
	for _, s := range p.scorers {
		if s.p.Weight == 0 {
			continue
		}
		clear(c.raw)
		start := now(timing)
		s.p.Score(c, c.candidates, c.raw)
		since(s.obs, timing, start)
		for i, v := range c.raw {
			c.total[i] += s.p.Weight * clamp01(v)
		}
	}
	if p.weightSum > 0 {
		for i := range c.total {
			c.total[i] /= p.weightSum
		}
	}
	start := now(timing)
	c.picked = p.picker.p.Pick(c, c.candidates, c.total)
	since(p.picker.obs, timing, start)
	if c.picked < 0 || c.picked >= n {
		panic("affinity: picker " + p.picker.p.Name() + " picked out of range")
	}
	if p.guard != nil {
		if to := p.guard.Spill(c.Now, c.candidates, c.total, c.picked); to != c.picked {
			c.spilled, c.spilledFrom = true, c.candidates[c.picked]
			c.picked = to
		}
	}
	return c.candidates[c.picked], nil
}

// Run runs the pipeline over candidates for req, outside any policy: for
// tests and for policies built on it. It does not retain candidates.
func (p *Pipeline) Run(ctx context.Context, req *Request, candidates []*pools.Endpoint) (*pools.Endpoint, error) {
	c := newCycle(req, candidates, time.Now())
	defer c.release()
	return p.run(ctx, c, p.sampled())
}

// clamp01 bounds a plugin's score to [0, 1]; NaN counts as 0.
func clamp01(v float64) float64 {
	switch {
	case v > 1:
		return 1
	case v >= 0:
		return v
	}
	return 0 // negative or NaN
}

// grow returns s with length n, reusing its array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/2)
	}
	return s[:n]
}
