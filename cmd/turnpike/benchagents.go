package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turnpike-gateway/turnpike/bench"
)

// registerAgentsFlags adds the agents workload's flags.
func registerAgentsFlags(fs *flag.FlagSet, a *bench.AgentsConfig, sf *simFlags) {
	fs.Var(phasesFlag{&a.Phases}, "phases", "agents: agents kept running in each phase, comma-separated (default 10,40,100; the keynote's is 100,400,1000)")
	fs.DurationVar((*time.Duration)(&a.PhaseDuration), "phase-duration", 0, "agents: each phase's length on the simulated clock (0: 30s)")
	fs.StringVar(&a.ProfileDir, "profile-dir", "", "agents: keep each phase's CPU profile of this process in this directory, as phase-K-POLICY.pprof (the bench client's goroutines labelled turnpike-bench=client), and its heap profile at the phase's end, as phase-K-POLICY.heap.pprof")
	fs.BoolVar(&sf.agentsApart, "engines-apart", true, "agents: run the embedded engines in two `turnpike sim` processes, so that this process's CPU and RSS are not theirs; false: all in this process")
	fs.BoolVar(&sf.agentsProcess, "agents-process", true, "agents: send the agents from a `turnpike bench tenant` process of their own, so that this process's CPU and RSS are the gateway's (and the recording of the agents' turns); false: the agents in this process, their goroutines labelled in its CPU profile")
}

// phasesFlag reads --phases: agent counts, comma-separated.
type phasesFlag struct{ p *[]int }

func (f phasesFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(*f.p)), ","), "[]")
}

func (f phasesFlag) Set(v string) error {
	var out []int
	for s := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("phase %q: %w", s, err)
		}
		out = append(out, n)
	}
	*f.p = out
	return nil
}

// agentsFleetDefaults sets the agents workload's fleet where the command
// line left it unset: llama-3.1-8b (the catalog's one model with a 128k
// context) on B200s, about 1.1M tokens of KV cache each, one replica for
// every 30 agents of the last phase, 16 to 32; at half real speed, which
// two cores keep up with at 100 agents (about 10 turns a second); the
// gateway writing each stream to its client at most once every 100ms of
// the fleet's clock (server.flushInterval), as a gateway in front of
// thousands of agents' streams is run: an agent reads its answer whole.
func agentsFleetDefaults(fs *flag.FlagSet, a bench.AgentsConfig) error {
	phases := a.Phases
	if len(phases) == 0 {
		phases = bench.DefaultAgentsPhases
	}
	replicas := min(max((phases[len(phases)-1]+29)/30, 16), 32)
	for _, d := range []struct{ flag, value string }{
		{"sim-accelerator", "b200"},
		{"sim-model", "llama-3.1-8b"},
		{"sim-served-model", "meta-llama/Llama-3.1-8B-Instruct"},
		{"sim-time-scale", "2"},
		{"sim-replicas", strconv.Itoa(replicas)},
		{"flush-interval", "100ms"},
	} {
		if !flagSet(fs, d.flag) {
			if err := fs.Set(d.flag, d.value); err != nil {
				return err
			}
		}
	}
	return nil
}
