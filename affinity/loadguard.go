package affinity

import (
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

// queueDepth is an endpoint's queue as routing sees it: the requests its
// engine reported waiting, less those that began to answer since
// (pools.Endpoint.Waiting, zero when the report is stale), plus this gateway's
// requests in flight to it (which count the moment they are sent, before
// any scrape can see them).
func queueDepth(ep *pools.Endpoint, now time.Time) float64 {
	return float64(ep.InFlight() + ep.Waiting(now))
}

// LoadGuard keeps a hot prefix from piling every session onto the endpoint
// that holds it. The rule: the picked endpoint is overloaded when its
// queue (see queueDepth) exceeds Factor × the mean queue of the candidates
// plus Slack; the pick then spills to the best-scoring candidate that is
// not overloaded. The least loaded candidate is at or below the mean, so
// with Factor ≥ 1 there always is one.
type LoadGuard struct {
	// Factor is the multiple of the mean queue allowed; at least 1.
	Factor float64
	// Slack is the queue allowed above Factor × mean, in requests.
	Slack float64
}

// Limit is the queue beyond which an endpoint is overloaded, given the
// candidates' mean queue.
func (g *LoadGuard) Limit(mean float64) float64 { return g.Factor*mean + g.Slack }

// Spill returns the position to route to instead of picked: picked itself
// unless it is overloaded, else the best-scoring candidate that is not.
func (g *LoadGuard) Spill(now time.Time, candidates []*pools.Endpoint, scores []float64, picked int) int {
	if len(candidates) < 2 {
		return picked
	}
	var sum float64
	for _, ep := range candidates {
		sum += queueDepth(ep, now)
	}
	limit := g.Limit(sum / float64(len(candidates)))
	if queueDepth(candidates[picked], now) <= limit {
		return picked
	}
	best := -1
	for i, ep := range candidates {
		if i == picked || queueDepth(ep, now) > limit {
			continue
		}
		if best < 0 || scores[i] > scores[best] {
			best = i
		}
	}
	if best < 0 {
		return picked // only when Factor < 1, which Validate rejects
	}
	return best
}
