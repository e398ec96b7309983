package responses

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/turnpike-gateway/turnpike/gossip"
)

// HeldCounts is how many background responses that have not ended one or
// more gateways hold: in all and by tenant.
type HeldCounts struct {
	Total    int
	ByTenant map[string]int
}

// HeldExchange is the exchange that makes the background caps
// (Config.MaxQueued, MaxQueuedPerTenant) hold for every gateway on one
// store together, not for each: each reports the responses it holds, in
// all and by tenant, and counts the others' reports in its admission. A
// report is at most an Interval old, so gateways that admit at once may
// together pass a cap by what they admit in one Interval; a gateway not
// heard from for MaxAge no longer counts, and the gateway that takes its
// responses over reports them. cfg's Name is set here; Workers stays
// each gateway's own bound on what it runs at once. The caller starts and
// closes the exchange.
func (s *Service) HeldExchange(cfg gossip.Config) (*gossip.Exchange[HeldCounts], error) {
	cfg.Name = HeldExchangeName
	return gossip.New(cfg, gossip.Codec[HeldCounts](heldCodec{s}))
}

// HeldExchangeName names the background caps' exchange.
const HeldExchangeName = "background-held"

// heldCodec reports the service's held counts. Body, integers unsigned
// varints:
//
//	total, n, n × (len tenant, tenant, held)
type heldCodec struct{ s *Service }

// maxHeldTenants bounds the tenants of one report, and so its size: a
// gateway holding responses of more tenants reports as many of them as
// this (whichever come first), and all of their responses in its total.
const maxHeldTenants = 4096

// maxHeldCount bounds each count of a report.
const maxHeldCount = 1 << 31

// Report implements gossip.Codec.
func (c heldCodec) Report(dst []byte) ([]byte, bool) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.held <= 0 {
		return dst, true
	}
	dst = binary.AppendUvarint(dst, uint64(s.mu.held))
	n := min(len(s.mu.heldByTenant), maxHeldTenants)
	dst = binary.AppendUvarint(dst, uint64(n))
	for tenant, held := range s.mu.heldByTenant {
		if n == 0 {
			break
		}
		n--
		dst = binary.AppendUvarint(dst, uint64(len(tenant)))
		dst = append(dst, tenant...)
		dst = binary.AppendUvarint(dst, uint64(held))
	}
	return dst, false
}

var errBadHeld = errors.New("responses: malformed background counts")

// Decode implements gossip.Codec.
func (heldCodec) Decode(b []byte) (HeldCounts, error) {
	r := gossip.NewReader(b)
	total := r.Uvarint()
	// Each tenant takes at least three bytes: a bound before allocating.
	n := r.Count(3)
	if !r.OK() || total > maxHeldCount || n > maxHeldTenants {
		return HeldCounts{}, errBadHeld
	}
	h := HeldCounts{Total: int(total), ByTenant: make(map[string]int, n)}
	for range n {
		tenant := r.Bytes()
		held := r.Uvarint()
		if _, dup := h.ByTenant[string(tenant)]; !r.OK() || len(tenant) == 0 || dup || held == 0 || held > maxHeldCount {
			return HeldCounts{}, errBadHeld
		}
		h.ByTenant[string(tenant)] = int(held)
	}
	if r.Len() != 0 {
		return HeldCounts{}, fmt.Errorf("%w: %d bytes after the counts", errBadHeld, r.Len())
	}
	return h, nil
}

// Peers implements gossip.Codec: the service's admission counts the sums.
func (c heldCodec) Peers(snapshots []HeldCounts) {
	sum := HeldCounts{ByTenant: map[string]int{}}
	for _, h := range snapshots {
		sum.Total += h.Total
		for tenant, n := range h.ByTenant {
			sum.ByTenant[tenant] += n
		}
	}
	c.s.mu.Lock()
	c.s.mu.peers = sum
	c.s.mu.Unlock()
}
