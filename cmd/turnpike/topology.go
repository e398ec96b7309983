package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/pools"
)

// Embedded fleet topologies (--sim-topology).
const (
	// topologyAggregated: every replica prefills and decodes, one pool.
	topologyAggregated = "aggregated"
	// topologyPD: a prefill pool and a decode pool of the same model,
	// disaggregated by the gateway (routing.pd).
	topologyPD = "pd"
)

// simFleet is the embedded simulated fleet to start.
type simFleet struct {
	cfg      sim.Config
	replicas int
	// prefill > 0 is the P/D topology: prefill engines of role prefill,
	// replicas − prefill of role decode.
	prefill int
	// tokenizer is the model directory of cfg.Tokenizer, which the pools
	// use too (tokenizer kind hf); "" for the simulator's rules.
	tokenizer string
}

// fleet is the embedded fleet: one simulated fleet per pool, its
// replicas numbered across them in pool order (bench.Replicas).
type fleet struct {
	pools  []pools.PoolConfig
	fleets []*sim.Fleet
}

// startFleet starts the engines of sf and the pool configs serving them.
func startFleet(ctx context.Context, sf simFleet) (*fleet, error) {
	type part struct {
		name, role string
		n          int
	}
	parts := []part{{"sim", sim.RoleBoth, sf.replicas}}
	if sf.prefill > 0 {
		if sf.prefill >= sf.replicas {
			return nil, fmt.Errorf("sim topology pd: %d prefill replicas leave none of %d to decode", sf.prefill, sf.replicas)
		}
		parts = []part{{"prefill", sim.RolePrefill, sf.prefill}, {"decode", sim.RoleDecode, sf.replicas - sf.prefill}}
	}
	f := &fleet{}
	for _, p := range parts {
		cfg := sf.cfg
		cfg.Role = p.role
		if len(parts) > 1 {
			cfg.Name = p.name
		}
		sfl, err := sim.StartFleet(ctx, p.n, cfg, "127.0.0.1", 0)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.fleets = append(f.fleets, sfl)
		pc := simPool(&cfg, sfl, p.name, p.role)
		if sf.tokenizer != "" {
			pc.Tokenizer = pools.TokenizerConfig{Kind: pools.TokenizerHF, Path: sf.tokenizer}
		}
		f.pools = append(f.pools, pc)
	}
	return f, nil
}

// URLs are every replica's base URL.
func (f *fleet) URLs() []string {
	var out []string
	for _, sf := range f.fleets {
		out = append(out, sf.URLs...)
	}
	return out
}

// Engines are every replica's engine.
func (f *fleet) Engines() []*sim.Engine {
	var out []*sim.Engine
	for _, sf := range f.fleets {
		out = append(out, sf.Engines...)
	}
	return out
}

func (f *fleet) locate(i int) (*sim.Fleet, int, error) {
	for _, sf := range f.fleets {
		if i < len(sf.URLs) {
			return sf, i, nil
		}
		i -= len(sf.URLs)
	}
	return nil, 0, fmt.Errorf("sim: no replica %d", i)
}

// Kill stops replica i.
func (f *fleet) Kill(i int) error {
	sf, j, err := f.locate(i)
	if err != nil {
		return err
	}
	return sf.Kill(j)
}

// Restart starts replica i again.
func (f *fleet) Restart(i int) error {
	sf, j, err := f.locate(i)
	if err != nil {
		return err
	}
	return sf.Restart(j)
}

// Close stops every replica.
func (f *fleet) Close() error {
	var errs []error
	for _, sf := range f.fleets {
		errs = append(errs, sf.Close())
	}
	return errors.Join(errs...)
}
