package main

import (
	"flag"

	"github.com/turnpike-gateway/turnpike/bench/scenario/restart"
)

// names the workload in --workload's help.
func registerRestartFlags(fs *flag.FlagSet) *restart.Options {
	if f := fs.Lookup("workload"); f != nil {
		f.Usage += "; or gateway-restart (agentic sessions on chat and responses through a front over --gateways gateways on one Redis, at least 2, each restarted in turn as SIGTERM does)"
	}
	var o restart.Options
	fs.IntVar(&o.Rounds, "restart-rounds", restart.DefaultRounds, "gateway-restart: how many times each gateway is restarted")
	fs.DurationVar(&o.Warmup, "restart-warmup", restart.DefaultWarmup, "gateway-restart: load before the first restart (wall clock)")
	fs.DurationVar(&o.Gap, "restart-gap", restart.DefaultGap, "gateway-restart: load between one restart and the next (wall clock)")
	return &o
}
