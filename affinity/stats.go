package affinity

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// EndpointStats keeps, per endpoint, moving averages measured from the
// outcomes of routed requests: the prefill throughput and the uncached
// prompt tokens of a request. Reads are lock-free: the table is an
// immutable slice of pointers published through an atomic.Pointer, grown
// by copy and swap; each entry's averages are atomics.
type EndpointStats struct {
	prior     float64 // prefill rate before any measurement, tokens/s
	smoothing float64 // weight of the newest sample

	table atomic.Pointer[[]*endpointStat]
	mu    sync.Mutex // serialises growing the table
}

type endpointStat struct {
	rate         atomicFloat // tokens/s; 0 until measured
	meanUncached atomicFloat // tokens; 0 until measured
	measured     atomic.Bool
}

// NewEndpointStats returns an empty table that assumes prior tokens/s of
// prefill until measured, and weighs each new sample by smoothing.
func NewEndpointStats(prior, smoothing float64) *EndpointStats {
	return &EndpointStats{prior: prior, smoothing: smoothing}
}

// get returns endpoint's prefill rate and mean uncached tokens per request;
// mean is -1 while nothing was measured.
func (s *EndpointStats) get(endpoint int) (rate, mean float64) {
	if t := s.table.Load(); t != nil && endpoint < len(*t) {
		if e := (*t)[endpoint]; e != nil && e.measured.Load() {
			return e.rate.load(), e.meanUncached.load()
		}
	}
	return s.prior, -1
}

// PrefillRate returns endpoint's measured prefill rate, in tokens per
// second, or the prior when none was measured.
func (s *EndpointStats) PrefillRate(endpoint int) float64 {
	r, _ := s.get(endpoint)
	return r
}

// Observe records a request on endpoint that prefilled uncached tokens in
// ttft. Requests too small to measure a rate by are ignored.
func (s *EndpointStats) Observe(endpoint, uncached int, ttft time.Duration) {
	if uncached <= 0 || ttft <= 0 {
		return
	}
	e := s.entry(endpoint)
	rate := float64(uncached) / ttft.Seconds()
	if e.measured.Load() {
		e.rate.ewma(rate, s.smoothing)
		e.meanUncached.ewma(float64(uncached), s.smoothing)
		return
	}
	e.rate.store(rate)
	e.meanUncached.store(float64(uncached))
	e.measured.Store(true)
}

func (s *EndpointStats) entry(endpoint int) *endpointStat {
	if t := s.table.Load(); t != nil && endpoint < len(*t) && (*t)[endpoint] != nil {
		return (*t)[endpoint]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var old []*endpointStat
	if t := s.table.Load(); t != nil {
		old = *t
	}
	if endpoint < len(old) && old[endpoint] != nil {
		return old[endpoint]
	}
	t := make([]*endpointStat, max(len(old), endpoint+1))
	copy(t, old)
	t[endpoint] = new(endpointStat)
	s.table.Store(&t)
	return t[endpoint]
}

// atomicFloat is a float64 in an atomic.Uint64.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) load() float64   { return math.Float64frombits(f.bits.Load()) }
func (f *atomicFloat) store(v float64) { f.bits.Store(math.Float64bits(v)) }

// ewma folds v into the average with weight a.
func (f *atomicFloat) ewma(v, a float64) {
	for {
		old := f.bits.Load()
		next := a*v + (1-a)*math.Float64frombits(old)
		if f.bits.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}
