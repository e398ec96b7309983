package affinity

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// EndpointStats keeps, per endpoint, moving averages measured from the
// outcomes of routed requests: the prefill throughput and the uncached
// prompt tokens of a request. Reads are lock-free (endpointTable); each
// entry's averages are atomics.
type EndpointStats struct {
	prior     float64 // prefill rate before any measurement, tokens/s
	smoothing float64 // weight of the newest sample

	table endpointTable[endpointStat]
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
	if e := s.table.load(endpoint); e != nil && e.measured.Load() {
		return e.rate.load(), e.meanUncached.load()
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
	e := s.table.entry(endpoint)
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

// endpointTable holds a *T by endpoint index. Reads are lock-free: the
// table is an immutable slice of pointers published through an
// atomic.Pointer, grown by copy and swap under mu.
type endpointTable[T any] struct {
	all atomic.Pointer[[]*T]
	mu  sync.Mutex // serialises growing the table
}

// load is index's entry; nil until entry made it.
func (t *endpointTable[T]) load(index int) *T {
	if s := t.all.Load(); s != nil && index >= 0 && index < len(*s) {
		return (*s)[index]
	}
	return nil
}

// entry is index's entry, made on first use.
func (t *endpointTable[T]) entry(index int) *T {
	if e := t.load(index); e != nil {
		return e
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var old []*T
	if s := t.all.Load(); s != nil {
		old = *s
	}
	if index < len(old) && old[index] != nil {
		return old[index]
	}
	s := make([]*T, max(len(old), index+1))
	copy(s, old)
	s[index] = new(T)
	t.all.Store(&s)
	return s[index]
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
