package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/report"
	"github.com/turnpike-gateway/turnpike/bench/scenario/agents"
	"github.com/turnpike-gateway/turnpike/bench/scenario/chaos"
	"github.com/turnpike-gateway/turnpike/bench/scenario/isolation"
	"github.com/turnpike-gateway/turnpike/bench/scenario/lending"
	"github.com/turnpike-gateway/turnpike/bench/scenario/lora"
	"github.com/turnpike-gateway/turnpike/bench/scenario/overload"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Run runs cfg's workload against target and returns its figures. It
// returns an error only when the run cannot start (bad config, unreadable
// trace); failed requests are figures, not errors. Cancelling ctx stops the
// run and returns what was measured so far.
func Run(ctx context.Context, cfg Config, target Target) (*Result, error) {
	return run(ctx, cfg, target, "")
}

// run runs cfg's workload, its requests labelled label (default: the
// workload's name).
func run(ctx context.Context, cfg Config, target Target, label string) (*Result, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if target.BaseURL == "" {
		return nil, errors.New("bench: target base URL is empty")
	}
	if label == "" {
		label = cfg.Workload
	}
	switch cfg.Workload {
	case workload.WorkloadTrace:
		r, err := driver.RunTrace(ctx, cfg, target, label)
		if err != nil {
			return nil, err
		}
		return report.ResultOf(r), nil
	case workload.WorkloadLongPrompt:
		r, err := driver.RunLongPrompt(ctx, cfg, target, label)
		if err != nil {
			return nil, err
		}
		return report.ResultOf(r), nil
	case workload.WorkloadIsolation:
		r, rep, err := isolation.Run(ctx, cfg, target, label)
		if err != nil {
			return nil, err
		}
		res := report.ResultOf(r)
		res.Isolation = rep
		return res, nil
	case workload.WorkloadChaos:
		r, rep, err := chaos.Run(ctx, cfg, target, label)
		if err != nil {
			return nil, err
		}
		res := report.ResultOf(r)
		res.Chaos = rep
		return res, nil
	case workload.WorkloadOverload:
		r, rep, err := overload.Run(ctx, cfg, target, label)
		if err != nil {
			return nil, err
		}
		res := report.ResultOf(r)
		res.Overload = rep
		return res, nil
	case workload.WorkloadLending:
		r, rep, err := lending.Run(ctx, cfg, target, label)
		if err != nil {
			return nil, err
		}
		res := report.ResultOf(r)
		res.Lending = rep
		return res, nil
	case workload.WorkloadLoRA:
		r, rep, err := lora.Run(ctx, cfg, target, label)
		if err != nil {
			return nil, err
		}
		res := report.ResultOf(r)
		res.LoRA = rep
		return res, nil
	case workload.WorkloadAgents:
		r, rep, err := agents.Run(ctx, cfg, target, label)
		if err != nil {
			return nil, err
		}
		res := report.ResultOf(r)
		res.Agents = rep
		return res, nil
	default:
		return report.ResultOf(driver.RunAgentic(ctx, cfg, target, label)), nil
	}
}

// Compare runs cfg's workload once per policy, repeat times, the policies'
// order reversed every other time (round-robin, cache-aware, then
// cache-aware, round-robin, …) so that a machine's drift falls on each
// policy alike. For each run it calls start to bring up a fresh fleet
// running that policy (fresh engine caches), runs against the Target start
// returns, then calls the stop function start returned. It keeps every run
// and, when repeat > 1, each figure's median over a policy's runs. A
// policy whose start fails stops the comparison with an error; the stop
// function is always called once start succeeded.
func Compare(ctx context.Context, cfg Config, policies []string, repeat int, start func(ctx context.Context, policy string) (Target, func() error, error)) (*Comparison, error) {
	if len(policies) == 0 {
		return nil, errors.New("bench: compare: no policies")
	}
	if repeat < 1 {
		return nil, fmt.Errorf("bench: compare: repeat %d, want at least 1", repeat)
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var results []*Result
	for k, order := range repeatOrder(policies, repeat) {
		for _, p := range order {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("bench: compare: %w", err)
			}
			res, err := runPolicy(ctx, cfg, p, start)
			if err != nil {
				return nil, err
			}
			if repeat > 1 {
				res.Run = k + 1
			}
			results = append(results, res)
		}
	}
	return report.Compared(results, policies, repeat), nil
}

// repeatOrder is the order of each of repeat runs of policies: as given,
// then reversed, and so on.
func repeatOrder(policies []string, repeat int) [][]string {
	out := make([][]string, repeat)
	for k := range out {
		order := slices.Clone(policies)
		if k%2 == 1 {
			slices.Reverse(order)
		}
		out[k] = order
	}
	return out
}

func runPolicy(ctx context.Context, cfg Config, policy string, start func(context.Context, string) (Target, func() error, error)) (res *Result, err error) {
	target, stop, err := start(ctx, policy)
	if err != nil {
		return nil, fmt.Errorf("bench: compare: starting %s: %w", policy, err)
	}
	defer func() {
		if stop == nil {
			return
		}
		if serr := stop(); serr != nil && err == nil {
			err = fmt.Errorf("bench: compare: stopping %s: %w", policy, serr)
		}
	}()
	res, err = run(ctx, cfg, target, policy)
	if err != nil {
		return nil, fmt.Errorf("bench: compare: %s: %w", policy, err)
	}
	res.Policy = policy
	return res, nil
}
