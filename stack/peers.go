package stack

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/gossip"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
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
func (s *Stack) startRoutePeers(ctx context.Context, db *state.DB, index *kv.Index, names []string, metrics prometheus.Registerer) error {
	cfg, log := &s.cfg, s.log
	if !cfg.Routing.shareRecords(cfg.State.Backend) {
		return nil
	}
	bc := db.Broadcast(routeRecordsChannel)
	if bc == nil {
		return nil
	}
	peers, err := kv.NewPeers(kv.PeersConfig{Index: index, Names: names, Transport: bc, Registerer: metrics, Logger: log})
	if err != nil {
		return err
	}
	return s.life.start(ctx, "routing records of other gateways", peers)
}

// startExchange starts the gossip exchange build makes, on the broadcast
// channel called channel, until the stack closes. It does nothing on a
// store that reaches no other process.
func startExchange[T any](ctx context.Context, s *Stack, db *state.DB, channel, what string, metrics *gossip.Metrics,
	build func(gossip.Config) (*gossip.Exchange[T], error)) error {
	bc := db.Broadcast(channel)
	if bc == nil {
		return nil
	}
	x, err := build(gossip.Config{Transport: bc, Metrics: metrics, Logger: s.log})
	if err != nil {
		return err
	}
	return s.life.start(ctx, what, x)
}

// startLoadShare shares the gateway's requests in flight on each endpoint
// with the other gateways on the same Redis (routing.shareLoad).
func (s *Stack) startLoadShare(ctx context.Context, db *state.DB, metrics *gossip.Metrics) error {
	if !s.cfg.Routing.shareLoad(s.cfg.State.Backend) {
		return nil
	}
	return startExchange(ctx, s, db, loadChannel, "load of other gateways", metrics,
		func(c gossip.Config) (*pools.LoadShare, error) { return pools.NewLoadShare(s.reg, c) })
}

// startHeldShare makes the background caps count every gateway's
// background responses on a store shared with other gateways (Redis).
func (s *Stack) startHeldShare(ctx context.Context, db *state.DB, svc *responses.Service, metrics *gossip.Metrics) error {
	return startExchange(ctx, s, db, heldChannel, "background responses of other gateways", metrics, svc.HeldExchange)
}
