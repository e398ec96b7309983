package dispatch

import (
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
)

// CachePrediction is what routing predicted cached of the turn's prompt on
// the endpoint it picked, and on the best other (docs/cache.md); false
// when the policy consulted no KV-cache index. Call it after Begin.
func (t *Turn) CachePrediction() (affinity.CachePrediction, bool) {
	return t.route.CachePrediction()
}

// CacheHeader is the request header that asks for the answer to carry
// the turn's CachePrediction, and that answer header.
const CacheHeader = affinity.CacheHeader

// CacheAccuracy is the routing policy's account of ep's cache predictions
// against what its engine delivered; false for a policy that keeps none.
func (d *Dispatcher) CacheAccuracy(ep *pools.Endpoint) (affinity.CacheAccuracy, bool) {
	return affinity.CacheAccuracyOf(d.policy, ep)
}
