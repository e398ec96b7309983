package stack

import (
	"context"

	"github.com/turnpike-gateway/turnpike/gossip"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/responses"
)

// routeRecordsChannel is the broadcast channel of routing records;
// loadChannel and heldChannel those of the load and background-count
// reports (gossip).
const (
	routeRecordsChannel = "kv-routes"
	loadChannel         = "gossip-load"
	heldChannel         = "gossip-background-held"
)

// startRoutePeers shares the gateway's routing records with the other
// gateways on the same Redis (routing.shareRecords): names are the
// endpoints' ids, which every gateway derives alike from the pools'
// URLs. It does nothing on a store that reaches no other process.
func (s *Stack) startRoutePeers(ctx context.Context, p *parts) error {
	if !s.cfg.Routing.shareRecords(s.cfg.State.Backend) {
		return nil
	}
	bc := p.db.Broadcast(routeRecordsChannel)
	if bc == nil {
		return nil
	}
	peers, err := kv.NewPeers(kv.PeersConfig{Index: p.index, Names: p.names, Transport: bc, Registerer: p.metrics, Logger: s.log})
	if err != nil {
		return err
	}
	return s.life.start(ctx, "routing records of other gateways", peers)
}

// startExchange starts the gossip exchange build makes, on the broadcast
// channel called channel, until the stack closes. It does nothing on a
// store that reaches no other process.
func startExchange[T any](ctx context.Context, s *Stack, p *parts, channel, what string,
	build func(gossip.Config) (*gossip.Exchange[T], error)) error {
	bc := p.db.Broadcast(channel)
	if bc == nil {
		return nil
	}
	x, err := build(gossip.Config{Transport: bc, Metrics: p.gossip, Logger: s.log})
	if err != nil {
		return err
	}
	return s.life.start(ctx, what, x)
}

// startLoadShare shares the gateway's requests in flight on each endpoint
// with the other gateways on the same Redis (routing.shareLoad).
func (s *Stack) startLoadShare(ctx context.Context, p *parts) error {
	if !s.cfg.Routing.shareLoad(s.cfg.State.Backend) {
		return nil
	}
	return startExchange(ctx, s, p, loadChannel, "load of other gateways",
		func(c gossip.Config) (*pools.LoadShare, error) { return pools.NewLoadShare(s.reg, c) })
}

// startHeldShare makes the background caps count every gateway's
// background responses on a store shared with other gateways (Redis).
func (s *Stack) startHeldShare(ctx context.Context, p *parts, svc *responses.Service) error {
	return startExchange(ctx, s, p, heldChannel, "background responses of other gateways", svc.HeldExchange)
}
