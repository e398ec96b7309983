package stack

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// fleetView keeps the KV-cache index in step with the fleet as discovery
// changes it: an endpoint that joins gets its name in the index's metrics,
// its pool's Shared-tier group and, when it publishes KV events, a
// subscription; one that leaves, once drained, loses its subscription and
// every block the index held for it, so that its index may serve another,
// and the sessions pinned to it their pins.
// It is the KV subscriptions' component: Start starts those of the
// endpoints that joined before it, Close stops them all.
type fleetView struct {
	index   *kv.Index
	hasher  *kv.Hasher
	metrics *kv.Collector
	log     *slog.Logger
	// kvEventsInterval spaces each subscription's reads
	// (fleet.kvEventsInterval).
	kvEventsInterval time.Duration
	// groups numbers the pools, whose set is fixed, for SetGroup.
	groups map[string]int

	mu struct {
		sync.Mutex
		// protects the fields below
		subs map[int]*kv.Subscriber
		// ctx is the subscriptions' context once started; nil before.
		ctx    context.Context
		closed bool
		// sess, once set (setSessions), hears each endpoint that leaves;
		// until then departed keeps when each left, for it to hear then.
		sess     *sessions.Store
		departed map[string]time.Time
		// handOff, once set (setHandOff), hands over the sessions of
		// each endpoint that starts to drain.
		handOff func(context.Context, *pools.Endpoint)
	}
}

func newFleetView(reg *pools.Registry, index *kv.Index, hasher *kv.Hasher, metrics *kv.Collector, log *slog.Logger) *fleetView {
	v := &fleetView{index: index, hasher: hasher, metrics: metrics, log: log, kvEventsInterval: reg.Options().KVEventsInterval, groups: map[string]int{}}
	v.mu.subs = map[int]*kv.Subscriber{}
	for _, p := range reg.Pools {
		// The replicas of a pool share its Shared tier (a store such as
		// LMCache's remote backend): a block in it counts for all of them.
		if _, ok := v.groups[p.Name()]; !ok {
			v.groups[p.Name()] = len(v.groups)
		}
	}
	reg.OnJoin(v.join)
	reg.OnLeave(v.leave)
	reg.OnDrain(v.drain)
	return v
}

// drain is the registry's OnDrain hook: the endpoint's sessions are
// handed over while it drains. Before the turn path is built no session
// has been served, and there is nothing to hand over.
func (v *fleetView) drain(ctx context.Context, ep *pools.Endpoint) {
	v.mu.Lock()
	handOff := v.mu.handOff
	v.mu.Unlock()
	if handOff != nil {
		handOff(ctx, ep)
	}
}

// setHandOff hands the view what hands over a draining endpoint's
// sessions (the dispatcher's HandOff).
func (v *fleetView) setHandOff(fn func(context.Context, *pools.Endpoint)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.mu.handOff = fn
}

// join is the registry's OnJoin hook.
func (v *fleetView) join(ep *pools.Endpoint) {
	v.metrics.SetName(ep.Index, ep.ID)
	v.index.SetGroup(ep.Index, v.groups[ep.Pool.Name()])
	if ep.KVEvents == "" {
		return
	}
	sub, err := kv.NewSubscriber(v.index, kv.SubscriberConfig{
		Endpoint: ep.Index,
		Addr:     ep.KVEvents,
		Model:    ep.Pool.Config.ServedModels[0],
		Hasher:   v.hasher,
		Logger:   v.log.With("endpoint", ep.ID),

		ReadInterval: v.kvEventsInterval,
	})
	if err != nil {
		// Routing still feeds the index; the engine's own events are lost.
		v.log.Warn("KV event subscription not possible", "endpoint", ep.ID, "err", err)
		return
	}
	v.metrics.AddSubscriber(ep.Index, sub)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.mu.closed {
		return
	}
	v.mu.subs[ep.Index] = sub
	if v.mu.ctx != nil {
		if err := sub.Start(v.mu.ctx); err != nil {
			v.log.Warn("KV event subscription did not start", "endpoint", ep.ID, "err", err)
		}
	}
}

// leave is the registry's OnLeave hook: the endpoint has drained.
func (v *fleetView) leave(ep *pools.Endpoint) {
	v.mu.Lock()
	sub := v.mu.subs[ep.Index]
	delete(v.mu.subs, ep.Index)
	started := v.mu.ctx != nil
	v.mu.Unlock()
	if sub != nil && started {
		ctx, cancel := context.WithTimeout(context.Background(), subscriptionsStop)
		if err := sub.Close(ctx); err != nil {
			v.log.Warn("KV event subscription did not stop", "endpoint", ep.ID, "err", err)
		}
		cancel()
	}
	// The subscription has ended: nothing records for the endpoint any
	// more but routing, which no longer picks it.
	v.index.Clear(ep.Index)
	v.index.SetStale(ep.Index, false)
	v.metrics.SetName(ep.Index, "")

	now := time.Now()
	v.mu.Lock()
	sess := v.mu.sess
	if sess == nil {
		if v.mu.departed == nil {
			v.mu.departed = map[string]time.Time{}
		}
		v.mu.departed[ep.ID] = now
	}
	v.mu.Unlock()
	if sess != nil {
		sess.EndpointLeft(ep.ID, now)
	}
}

// setSessions hands the view the session store, built after the pools
// start, with the endpoints that left before: their pins go when it
// hears of them. Call it before the store loads its pins (Start), so that
// pins restored to an endpoint gone meanwhile go too.
func (v *fleetView) setSessions(s *sessions.Store) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.mu.sess = s
	for id, at := range v.mu.departed {
		s.EndpointLeft(id, at)
	}
	v.mu.departed = nil
}

// Start starts the subscriptions of the endpoints that joined so far;
// those that join later start as they join.
func (v *fleetView) Start(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.mu.ctx = context.WithoutCancel(ctx)
	return subscriptions(mapValues(v.mu.subs)).Start(v.mu.ctx)
}

// Close stops every subscription, within subscriptionsStop.
func (v *fleetView) Close(ctx context.Context) error {
	v.mu.Lock()
	v.mu.closed = true
	subs := mapValues(v.mu.subs)
	started := v.mu.ctx != nil
	v.mu.subs = map[int]*kv.Subscriber{}
	v.mu.Unlock()
	if !started {
		return nil
	}
	return subscriptions(subs).Close(ctx)
}

func mapValues(m map[int]*kv.Subscriber) []*kv.Subscriber {
	out := make([]*kv.Subscriber, 0, len(m))
	for _, s := range m {
		out = append(out, s)
	}
	return out
}
