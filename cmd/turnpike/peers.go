package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/state"
)

// routeRecordsChannel is the broadcast channel of routing records.
const routeRecordsChannel = "kv-routes"

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
