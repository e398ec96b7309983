package affinity

import (
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/turnpike-gateway/turnpike/pools"
)

// FilterLoRAAffinity sends a request for a LoRA adapter to the replicas
// that have it loaded, else to one that will load it (LoRAAffinity).
const FilterLoRAAffinity = "lora-affinity"

// LoRAAffinity keeps, for a request that names a LoRA adapter
// (pools.Endpoint.IsAdapter), the candidates that have it loaded or are
// loading it (pools.Endpoint.HasAdapter) and whose queue is under
// MaxQueue: the scorers then weigh prefix and load among them. When none
// has, it keeps one: the candidate chosen by rendezvous hashing of the
// adapter (xxhash of the adapter and of the endpoint, mixed; highest
// wins) among those with a free adapter slot, or among all when none has
// one. Every gateway picks the same replica for an adapter, a replica
// that leaves moves only its own adapters, and an adapter grows onto a
// second replica only when the first is past MaxQueue. Requests for base
// models pass untouched.
type LoRAAffinity struct {
	// MaxQueue is the queue (engine waiting + gateway in flight) beyond
	// which a replica holding the adapter no longer counts as holding it;
	// zero means DefaultMaxQueue.
	MaxQueue int
}

// Name implements Plugin.
func (LoRAAffinity) Name() string { return FilterLoRAAffinity }

// Filter implements Filter.
func (f LoRAAffinity) Filter(c *Cycle, candidates []*pools.Endpoint) []*pools.Endpoint {
	model := c.Request.Model
	if model == "" || c.Request.Prefill || !anyAdapter(candidates, model) {
		return candidates
	}
	limit := float64(f.MaxQueue)
	if f.MaxQueue <= 0 {
		limit = DefaultMaxQueue
	}
	// The holders under the bound move to the front (none moves while
	// there are none, so candidates stay whole for what follows).
	holding, busy := 0, 0
	for _, ep := range candidates {
		if ep.HasAdapter(model, c.Now) {
			if queueDepth(ep, c.Now) < limit {
				candidates[holding] = ep
				holding++
			} else {
				busy++
			}
		}
	}
	if holding > 0 {
		return candidates[:holding]
	}
	if busy > 0 && busy < len(candidates) {
		// Every replica holding it is past the queue bound: it grows
		// onto another.
		n := 0
		for _, ep := range candidates {
			if !ep.HasAdapter(model, c.Now) {
				candidates[n] = ep
				n++
			}
		}
		candidates = candidates[:n]
	}
	best := rendezvous(candidates, model, c.Now)
	candidates[0] = candidates[best]
	return candidates[:1]
}

// anyAdapter reports whether model is an adapter of some candidate's.
func anyAdapter(candidates []*pools.Endpoint, model string) bool {
	for _, ep := range candidates {
		if ep.IsAdapter(model) {
			return true
		}
	}
	return false
}

// rendezvous is the position of the candidate with the highest
// rendezvous weight for adapter among those with a free slot, or among
// all when none has one.
func rendezvous(candidates []*pools.Endpoint, adapter string, now time.Time) int {
	key := xxhash.Sum64String(adapter)
	best, bestFree, bestWeight := -1, false, uint64(0)
	for i, ep := range candidates {
		used, slots := ep.AdapterSlots(now)
		free := slots == 0 || used < slots
		w := mix(key, xxhash.Sum64String(ep.ID))
		if best < 0 || free && !bestFree || free == bestFree && w > bestWeight {
			best, bestFree, bestWeight = i, free, w
		}
	}
	return best
}

var _ Filter = LoRAAffinity{}
