package dispatch

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/turns"
)

// The gate: what the gateway does with a request before admission —
// decode it, load its chain, render and encode its prompt — costs CPU in
// proportion to the prompt, and every request arriving at once shares the
// host's cores for it. When an agent burst's eighty new sessions arrive in
// the same millisecond as one interactive turn, that turn would reach flow
// control, which puts it first, only after the scheduler had given a
// slice to every one of them. So the requests that cannot be Interactive
// take that work a few at a time (Options.GateSlots), in arrival order,
// and the others pass by: an interactive turn waits for the CPU behind a
// handful of requests, not behind a burst.
//
// Which requests can be Interactive is read before the body: the tenant's
// bands and the x-turnpike-priority header (turns.Classify). A request
// that asks for Interactive only in its body (service_tier "priority")
// takes a slot like the rest; it waits, at most, for the work of the
// requests ahead of it, which it would have shared the CPU with anyway.

// gate bounds the lower bands' work before admission.
type gate struct {
	slots   chan struct{}
	waiting prometheus.Gauge
	waits   prometheus.Histogram
}

// gateWaitBuckets span 100µs to 1s: a few requests' decoding to a burst's.
var gateWaitBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

func newGate(slots int) *gate {
	return &gate{
		slots: make(chan struct{}, slots),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "turnpike_gate_waiting_requests",
			Help: "Requests of the bands below interactive waiting for one of the gate's slots, to be decoded and encoded before admission.",
		}),
		waits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "turnpike_gate_wait_seconds",
			Help:    "Time requests of the bands below interactive waited for a gate slot, 0 for those that found one free.",
			Buckets: gateWaitBuckets,
		}),
	}
}

func (g *gate) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.waiting, g.waits}
}

// pass is one request's gate slot. Its owner leaves it when the work it
// bounds is done: Begin as the turn enters admission, the caller once its
// handler returns, whichever comes first.
type pass struct {
	g    *gate
	left atomic.Bool
}

func (p *pass) leave() {
	if p != nil && p.left.CompareAndSwap(false, true) {
		<-p.g.slots
	}
}

type passKey struct{}

// Enter is a request's way into the gate, called once its body is read
// and before it is decoded. A request its tenant and header can make
// Interactive passes at once; any other waits for a slot, first come first
// served, or until ctx ends (the client has gone). The context returned
// carries the slot to Begin, which gives it back as the turn enters
// admission; the caller must call leave when its handler returns, and
// should call it before work after the turn that needs no slot (following
// a background response it queued). leave may be called more than once.
func (d *Dispatcher) Enter(ctx context.Context, tenant string, h http.Header) (_ context.Context, leave func(), err error) {
	if d.gate == nil || d.mayBeInteractive(tenant, h) {
		return ctx, func() {}, nil
	}
	g, start := d.gate, time.Now()
	select {
	case g.slots <- struct{}{}:
	default:
		g.waiting.Inc()
		select {
		case g.slots <- struct{}{}:
			g.waiting.Dec()
		case <-ctx.Done():
			g.waiting.Dec()
			return ctx, func() {}, context.Cause(ctx)
		}
	}
	g.waits.Observe(time.Since(start).Seconds())
	p := &pass{g: g}
	return context.WithValue(ctx, passKey{}, p), p.leave, nil
}

// mayBeInteractive reports whether a request of tenant with header h is
// Interactive before its body says more.
func (d *Dispatcher) mayBeInteractive(tenant string, h http.Header) bool {
	var t turns.Tenant
	if d.flow != nil {
		t = d.flow.Tenant(tenant)
	}
	return turns.Classify(t, turns.Hints{Priority: h.Get(PriorityHeader)}) == turns.Interactive
}

// leaveGate gives back the gate slot ctx carries, if any.
func leaveGate(ctx context.Context) {
	p, _ := ctx.Value(passKey{}).(*pass)
	p.leave()
}
