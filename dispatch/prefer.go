package dispatch

import (
	"context"
	"sync"

	"github.com/turnpike-gateway/turnpike/pools"
)

// Affinity is an endpoint that a caller's turns keep going to: a
// Responses WebSocket connection holds one for its life, so that every
// turn on it is sent to the replica its first turn went to, which holds
// the connection's KV-cache prefix. A turn whose context carries one (see
// WithAffinity) is offered to that endpoint alone first, through the
// policy's own filters; an endpoint that is not available (unhealthy,
// draining, breaker open) or that the policy's filters refuse (out of
// room) is passed over and the turn is picked among all as usual. The
// endpoint that serves a turn becomes the one preferred next. Safe for
// concurrent use.
type Affinity struct {
	mu sync.Mutex
	id string
}

// Endpoint is the ID of the endpoint preferred now; "" before any turn.
func (a *Affinity) Endpoint() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.id
}

func (a *Affinity) set(id string) {
	a.mu.Lock()
	a.id = id
	a.mu.Unlock()
}

type affinityKey struct{}

// WithAffinity returns ctx carrying a: the turns begun with it prefer its
// endpoint.
func WithAffinity(ctx context.Context, a *Affinity) context.Context {
	return context.WithValue(ctx, affinityKey{}, a)
}

func affinityFrom(ctx context.Context) *Affinity {
	a, _ := ctx.Value(affinityKey{}).(*Affinity)
	return a
}

// preferred is the candidate a names when it is available, else nil.
func (a *Affinity) preferred(candidates []*pools.Endpoint) *pools.Endpoint {
	if a == nil {
		return nil
	}
	id := a.Endpoint()
	if id == "" {
		return nil
	}
	for _, ep := range candidates {
		if ep.ID == id && ep.Available() {
			return ep
		}
	}
	return nil
}
