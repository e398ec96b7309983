package pools

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/turnpike-gateway/turnpike/gossip"
)

// PeerLoad is what the other gateways routing onto the fleet last reported
// of their requests on one endpoint (LoadShare): the sums over every
// gateway heard from within the exchange's MaxAge.
type PeerLoad struct {
	// InFlight and InFlightTokens are the other gateways' requests in
	// flight there and their estimated tokens (prompt and output budget).
	InFlight, InFlightTokens int64
}

// Peers returns the other gateways' load on e; zero with no LoadShare or
// no peer heard from lately.
func (e *Endpoint) Peers() PeerLoad {
	if p := e.peers.Load(); p != nil {
		return *p
	}
	return PeerLoad{}
}

// LoadShare gives every gateway on one fleet the load of all: each reports
// its requests in flight on every endpoint (count and estimated tokens)
// every interval, and adds what the others report to each endpoint's
// Peers. Routing and admission read an endpoint's InFlight and
// InFlightTokens with the peers' included, so two gateways behind one
// Service spread their turns as one gateway would, and neither fills an
// engine the other has already filled. The engines' scraped queues count
// everyone's requests already; what the reports add is the requests sent
// since the last scrape and the tokens each gateway estimated for them.
//
// A report is a snapshot, not a change (gossip.Exchange): a lost one
// costs an interval of staleness, and a gateway that stops reporting is
// forgotten after the exchange's MaxAge. A gateway with nothing to report
// reports once, then stays silent until it has.
type LoadShare = gossip.Exchange[[]PeerLoad]

// LoadShareExchange names the load share's exchange (gossip.Config.Name).
const LoadShareExchange = "load"

// NewLoadShare builds the load share of reg's endpoints on the exchange
// cfg configures (its Name is set here); nothing runs until Start.
func NewLoadShare(reg *Registry, cfg gossip.Config) (*LoadShare, error) {
	if reg == nil {
		return nil, errors.New("pools: load share: Registry required")
	}
	c := &loadCodec{reg: reg}
	cfg.Name = LoadShareExchange
	x, err := gossip.New(cfg, gossip.Codec[[]PeerLoad](c))
	if err != nil {
		return nil, fmt.Errorf("pools: load share: %w", err)
	}
	return x, nil
}

// loadCodec is the load share's report: per endpoint with something to
// report, all integers unsigned varints,
//
//	n                          entries
//	n × (len name, in flight, in-flight tokens)
//
// A name is the endpoint's ID (host:port), which every gateway derives
// alike from the pools' URLs; a peer's snapshot is by this gateway's
// endpoint index, and leaves out the engines it does not route to. A
// snapshot is by the indexes of the fleet when it was decoded: should an
// endpoint leave and its index go to one that joins, the new one reads
// the old one's figures until the peer's next report replaces them.
type loadCodec struct {
	reg *Registry
}

// own is this gateway's own load on ep, as reported.
func (c *loadCodec) own(ep *Endpoint) PeerLoad {
	return PeerLoad{InFlight: min(max(ep.OwnInFlight(), 0), maxFigure), InFlightTokens: min(max(ep.OwnInFlightTokens(), 0), maxFigure)}
}

// maxFigure bounds each figure of a report, so that the sums over
// gossip.MaxPeers peers cannot overflow an int64.
const maxFigure = 1 << 53

// Report implements gossip.Codec.
func (c *loadCodec) Report(dst []byte) ([]byte, bool) {
	var n int
	for _, ep := range c.reg.Endpoints() {
		if c.own(ep) != (PeerLoad{}) {
			n++
		}
	}
	if n == 0 {
		return dst, true
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	for _, ep := range c.reg.Endpoints() {
		l := c.own(ep)
		if l == (PeerLoad{}) {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(len(ep.ID)))
		dst = append(dst, ep.ID...)
		dst = binary.AppendUvarint(dst, uint64(l.InFlight))
		dst = binary.AppendUvarint(dst, uint64(l.InFlightTokens))
	}
	return dst, false
}

// errBadReport is what Decode says of a body it cannot read.
var errBadReport = errors.New("pools: malformed load report")

// Decode implements gossip.Codec.
func (c *loadCodec) Decode(b []byte) ([]PeerLoad, error) {
	r := gossip.NewReader(b)
	// Each entry takes at least four bytes: a bound before reading on.
	count := r.Count(4)
	if count == 0 {
		return nil, errBadReport
	}
	f := c.reg.fleet.Load()
	load := make([]PeerLoad, f.indexes)
	for range count {
		name := r.Bytes()
		inFlight, tokens := r.Uvarint(), r.Uvarint()
		if !r.OK() || len(name) == 0 || len(name) > 255 || inFlight > maxFigure || tokens > maxFigure {
			return nil, errBadReport
		}
		if ep, ok := f.byID[string(name)]; ok {
			load[ep.Index] = PeerLoad{InFlight: int64(inFlight), InFlightTokens: int64(tokens)}
		}
	}
	if r.Len() != 0 {
		return nil, errBadReport
	}
	return load, nil
}

// Peers implements gossip.Codec: it publishes each endpoint's sums.
func (c *loadCodec) Peers(snapshots [][]PeerLoad) {
	for _, ep := range c.reg.Endpoints() {
		var sum PeerLoad
		for _, s := range snapshots {
			if ep.Index < len(s) {
				sum.InFlight += s[ep.Index].InFlight
				sum.InFlightTokens += s[ep.Index].InFlightTokens
			}
		}
		if old := ep.peers.Load(); old == nil && sum == (PeerLoad{}) || old != nil && *old == sum {
			continue
		}
		ep.peers.Store(&sum)
	}
}
