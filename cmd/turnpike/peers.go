package main

import (
	"context"
	"log/slog"

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
func startRoutePeers(ctx context.Context, st *stack, cfg *Config, db *state.DB, index *kv.Index, names []string, metrics prometheus.Registerer, log *slog.Logger) error {
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
	return st.life.start(ctx, "routing records of other gateways",
		startNoErr(func() { peers.Start(context.WithoutCancel(ctx)) }), noErr(peers.Close))
}

// startExchange starts the gossip exchange build makes, on the broadcast
// channel called channel, until the stack closes. It does nothing on a
// store that reaches no other process.
func startExchange[T any](ctx context.Context, st *stack, db *state.DB, channel, what string, metrics *gossip.Metrics, log *slog.Logger,
	build func(gossip.Config) (*gossip.Exchange[T], error)) error {
	bc := db.Broadcast(channel)
	if bc == nil {
		return nil
	}
	x, err := build(gossip.Config{Transport: bc, Metrics: metrics, Logger: log})
	if err != nil {
		return err
	}
	return st.life.start(ctx, what, startNoErr(func() { x.Start(context.WithoutCancel(ctx)) }), noErr(x.Close))
}

// startLoadShare shares the gateway's requests in flight on each endpoint
// with the other gateways on the same Redis (routing.shareLoad).
func startLoadShare(ctx context.Context, st *stack, cfg *Config, db *state.DB, metrics *gossip.Metrics, log *slog.Logger) error {
	if !cfg.Routing.shareLoad(cfg.State.Backend) {
		return nil
	}
	return startExchange(ctx, st, db, loadChannel, "load of other gateways", metrics, log,
		func(c gossip.Config) (*pools.LoadShare, error) { return pools.NewLoadShare(st.reg, c) })
}

// startHeldShare makes the background caps count every gateway's
// background responses on a store shared with other gateways (Redis).
func startHeldShare(ctx context.Context, st *stack, db *state.DB, svc *responses.Service, metrics *gossip.Metrics, log *slog.Logger) error {
	return startExchange(ctx, st, db, heldChannel, "background responses of other gateways", metrics, log, svc.HeldExchange)
}
