package affinity

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/pools"
)

// SessionHash routes by consistent hashing of the session key, tenant
// included, on a ring with VirtualNodes points per endpoint: what a
// session-affinity ingress gives, and the baseline the cache-aware policy
// is measured against. A sessionless request goes round-robin: hashing
// something every request shares (an empty key, a common first block)
// would send the whole fleet's sessionless traffic to one endpoint, which
// no operator would leave configured. An unavailable endpoint's keys move to the next endpoint on
// the ring; everyone else's stay.
//
// Rings are built once per distinct candidate set and published in a
// copy-on-write map, so Pick does not allocate once warm.
type SessionHash struct {
	vnodes    int
	next      atomic.Uint64
	decisions [numReasons]prometheus.Counter

	rings atomic.Pointer[map[uint64]*ring]
	mu    sync.Mutex // serialises building rings
}

// maxRings bounds the cached rings; a full cache starts over.
const maxRings = 64

// ring is a sorted circle of points, each owned by an endpoint Index.
type ring struct {
	points []uint64
	owners []int
}

// NewSessionHash returns a session-hash policy with vnodes points per
// endpoint (zero means DefaultVirtualNodes).
func NewSessionHash(vnodes int) *SessionHash {
	if vnodes <= 0 {
		vnodes = DefaultVirtualNodes
	}
	s := &SessionHash{vnodes: vnodes}
	s.decisions = discardMetrics().reasonCounters(PolicySessionHash)
	return s
}

// Name implements Policy.
func (*SessionHash) Name() string { return PolicySessionHash }

// Pick implements Policy.
func (s *SessionHash) Pick(_ context.Context, req *Request, candidates []*pools.Endpoint) (*pools.Endpoint, error) {
	var key uint64
	switch {
	case req.SessionKey != "":
		key = mix(xxhash.Sum64String(req.SessionKey), xxhash.Sum64String(req.Tenant))
		s.decisions[reasonSessionHash].Inc()
	default:
		s.decisions[reasonRoundRobin].Inc()
		start := int(s.next.Add(1) % uint64(len(candidates)))
		for i := range candidates {
			if ep := candidates[(start+i)%len(candidates)]; ep.Available() {
				return ep, nil
			}
		}
		return nil, ErrNoEndpoint
	}
	r := s.ring(candidates)
	i, _ := slices.BinarySearch(r.points, key)
	for step := range r.points {
		owner := r.owners[(i+step)%len(r.points)]
		for _, ep := range candidates {
			if ep.Index == owner && ep.Available() {
				return ep, nil
			}
		}
	}
	return nil, ErrNoEndpoint
}

// Done implements Policy.
func (*SessionHash) Done(*Request, *pools.Endpoint, Outcome) {}

// ring returns the ring of the candidate set, building it on first use.
// The set is keyed independently of order.
func (s *SessionHash) ring(candidates []*pools.Endpoint) *ring {
	var fp uint64
	for _, ep := range candidates {
		fp += mix(uint64(ep.Index)+1, 0)
	}
	fp = mix(fp, uint64(len(candidates)))
	if m := s.rings.Load(); m != nil {
		if r := (*m)[fp]; r != nil {
			return r
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[uint64]*ring)
	if m := s.rings.Load(); m != nil {
		if r := (*m)[fp]; r != nil {
			return r
		}
		if len(*m) < maxRings {
			for k, v := range *m {
				next[k] = v
			}
		}
	}
	r := buildRing(candidates, s.vnodes)
	next[fp] = r
	s.rings.Store(&next)
	return r
}

func buildRing(candidates []*pools.Endpoint, vnodes int) *ring {
	type point struct {
		h     uint64
		owner int
	}
	pts := make([]point, 0, len(candidates)*vnodes)
	var buf []byte
	for _, ep := range candidates {
		for v := range vnodes {
			buf = strconv.AppendInt(append(append(buf[:0], ep.ID...), '#'), int64(v), 10)
			pts = append(pts, point{xxhash.Sum64(buf), ep.Index})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		switch {
		case a.h < b.h:
			return -1
		case a.h > b.h:
			return 1
		}
		return a.owner - b.owner
	})
	r := &ring{points: make([]uint64, len(pts)), owners: make([]int, len(pts))}
	for i, p := range pts {
		r.points[i], r.owners[i] = p.h, p.owner
	}
	return r
}

// mix combines two hashes (splitmix64's finaliser over their sum).
func mix(a, b uint64) uint64 {
	z := a + 0x9e3779b97f4a7c15*(b+1)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

var _ Policy = (*SessionHash)(nil)
