package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/bench/embedded"
	"github.com/turnpike-gateway/turnpike/stack"
)

// benchCmd runs the load generator against a gateway at --url, or against
// embedded stacks (simulated fleet + gateway) it starts itself: one per
// policy with --compare, each from cold engine caches.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.Config
	url := fs.String("url", "", "base URL of an OpenAI-compatible gateway; empty: start an embedded fleet and gateway")
	apiKey := fs.String("api-key", "", "API key sent as a bearer token")
	engineMetrics := fs.String("engine-metrics", "", "with --url: comma-separated engine /metrics URLs, for the engines' own prefix-cache hit rate")
	policy := fs.String("policy", "cache-aware", "embedded: the routing policy")
	ttftTarget := fs.Duration("ttft-target", affinity.DefaultTTFTTargets[affinity.BandStandard], "embedded: the TTFT target on the simulated fleet's clock, of the cost report's SLO attainment and of the price scorer's every band")
	flushInterval := fs.Duration("flush-interval", 0, "embedded: the gateway's server.flushInterval on the simulated fleet's clock: after a stream's first token, at most one write to the client an interval (agents: 100ms)")
	gatewayConfig := fs.String("gateway-config", "", "embedded: the gateway's config file (YAML, as turnpike serve reads it, without pools: the fleet's are added), for every gateway a --compare entry starts (not gateway-restart, rollout or lending); the routing policy, listen address, data directory and server.flushInterval are the bench's; its runtime section tunes this process's collector")
	var sf simFlags
	compare := fs.String("compare", "", "embedded: comma-separated policies to run in turn, e.g. round-robin,session-hash,cache-aware; an entry may name a topology instead (aggregated, pd, hbm, cpu-tier, mixed: --policy on it) or both (cache-aware@pd, cost-aware@mixed), and the KV index's mode: cache-aware@precise (the default: confirmed by the engines' KV events) against cache-aware@approximate (no KV events: what the gateway routed), also after a topology (cache-aware@hbm+approximate), and gateways (cache-aware@2gw, see --gateways)")
	repeat := fs.Int("repeat", 1, "with --compare: run the policies this many times, their order reversed every other time, and report each figure's median over a policy's runs beside every run (rollout: its modes, each mode's runs pooled)")
	interfereURLs := fs.String("interfere-urls", "", "with --url and --interfere-rate: comma-separated engine base URLs the interfering client sends to")
	out := fs.String("out", "bench-results", "directory for results.json, report.html and report.md")
	logLevel := fs.String("log-level", "warn", "embedded gateway log level")
	fs.StringVar(&cfg.Workload, "workload", bench.DefaultWorkload, "agentic, trace, isolation, chaos (agentic sessions on chat and responses while embedded replicas are killed and restarted), long-prompt, overload (all three bands past the fleet's capacity), lending (a simulated trainer on a lendable pool, with and without lending its idle time), lora (sessions spread over LoRA adapters by Zipf popularity on a fleet with fewer adapter slots than adapters), agents (coding-agent sessions of the published agentic-trace shape, more agents in each of --phases, each phase against its TTFT floor) or rollout (agentic sessions while every replica is replaced, one at a time, by one of a new revision; --compare warm-up,no-warm-up runs it with and without the warm-up of handed-over sessions)")
	fs.StringVar(&cfg.API, "api", bench.DefaultAPI, "agentic: responses (previous_response_id chains) or chat (full history)")
	fs.StringVar(&cfg.Model, "model", "", "model name to request (embedded: the fleet's served model)")
	fs.Int64Var(&cfg.Seed, "seed", bench.DefaultSeed, "workload seed")
	fs.BoolVar(&cfg.KeepSamples, "samples", false, "put every request's record (start, TTFT, tokens, status, tenant, band) in results.json")
	fs.Float64Var(&cfg.Rate, "rate", 0, "cap on requests per second (0: none)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", 0, "cap on concurrent requests (0: none)")
	fs.DurationVar((*time.Duration)(&cfg.MaxDuration), "max-duration", 0, "stop after this long (0: when the workload ends)")
	fs.IntVar(&cfg.Agentic.Sessions, "sessions", benchSessions, "agentic: agent sessions in all")
	fs.IntVar(&cfg.Agentic.TurnsPerSession, "turns", benchTurns, "agentic: turns per session")
	fs.IntVar(&cfg.Agentic.Tenants, "tenants", bench.DefaultTenants, "agentic: tenants (each with its own system prompt and tools)")
	fs.IntVar(&cfg.Agentic.SystemPromptTokens, "system-tokens", bench.DefaultSystemPromptTokens, "agentic: shared system prompt tokens per tenant")
	fs.IntVar(&cfg.Agentic.ToolSchemaTokens, "tool-schema-tokens", bench.DefaultToolSchemaTokens, "agentic: tool schema tokens per tenant")
	fs.IntVar(&cfg.Agentic.ToolResultTokens, "tool-result-tokens", benchToolResultTokens, "agentic: tokens of each tool result")
	fs.IntVar(&cfg.Agentic.OutputTokens, "output-tokens", bench.DefaultOutputTokens, "agentic: output tokens per turn")
	fs.IntVar(&cfg.Agentic.Waves, "waves", bench.DefaultWaves, "agentic: sessions start in this many bursts (open loop)")
	fs.IntVar(&cfg.Agentic.Concurrency, "concurrency", benchConcurrency, "agentic: run closed loop, this many sessions at once, the next starting as one ends (0: open loop, in waves)")
	fs.Float64Var(&cfg.Agentic.TimeScale, "agentic-time-scale", 0, "agentic: multiply think times, loop gaps and wave intervals by this (0: the simulated fleet's time scale when embedded, else 1)")
	kvCapacity := fs.Int("kv-capacity-tokens", 0, "with --url: the fleet's total KV cache in tokens, for the trace's ideal reuse (0: unbounded)")
	fs.StringVar(&cfg.Trace.Path, "trace", bench.DefaultTracePath, "trace: the Mooncake conversation trace (JSONL)")
	fs.Float64Var(&cfg.Trace.TimeScale, "trace-time-scale", 0, "trace: multiply arrival times by this (0.1 = ten times faster; 0: twice the simulated fleet's time scale when embedded, half the recorded rate, else 1)")
	traceSpeed := fs.Float64("trace-speed", 0, "trace: replay at this multiple of the recorded rate (1, 2, 4…), on the simulated fleet's clock when embedded; instead of --trace-time-scale")
	fs.IntVar(&cfg.Trace.Limit, "trace-limit", 0, "trace: replay only the first N requests (0: all)")
	fs.StringVar(&cfg.Isolation.KeyA, "key-a", "", "isolation with --url: tenant A's API key")
	fs.StringVar(&cfg.Isolation.KeyB, "key-b", "", "isolation with --url: tenant B's API key")
	fs.BoolVar(&sf.apart, "isolation-processes", true, "isolation: send each tenant from a process of its own (`turnpike bench tenant`) and run the embedded engines in two (`turnpike sim`: the interactive lane's engine, then the rest), as tenants and engines on other machines would be; false: all in this process beside tenant A's client and the gateway")
	fs.DurationVar((*time.Duration)(&cfg.Isolation.Duration), "isolation-duration", bench.DefaultIsolationDuration, "isolation: how long tenant A is measured alone, and how long under B's burst, in --isolation-rounds stretches each, taking turns in one run")
	fs.IntVar(&cfg.Isolation.Rounds, "isolation-rounds", bench.DefaultIsolationRounds, "isolation: how many times the run goes from tenant A alone to A under B's burst")
	fs.Float64Var(&cfg.Isolation.ARate, "isolation-a-rate", bench.DefaultIsolationARate, "isolation: tenant A's interactive turns per second")
	fs.DurationVar((*time.Duration)(&cfg.Chaos.FirstKill), "chaos-first-kill", bench.DefaultChaosFirstKill, "chaos: first kill, from the run's start")
	fs.DurationVar((*time.Duration)(&cfg.Chaos.KillInterval), "chaos-interval", bench.DefaultChaosKillInterval, "chaos: time between kills")
	fs.DurationVar((*time.Duration)(&cfg.Chaos.Downtime), "chaos-downtime", bench.DefaultChaosDowntime, "chaos: how long a killed replica stays down")
	fs.IntVar(&cfg.Chaos.AtOnce, "chaos-at-once", bench.DefaultChaosAtOnce, "chaos: replicas killed at once")
	fs.IntVar(&cfg.LongPrompt.Requests, "long-requests", bench.DefaultLongPromptRequests, "long-prompt: requests in all")
	fs.IntVar(&cfg.LongPrompt.PromptTokens, "long-prompt-tokens", bench.DefaultLongPromptTokens, "long-prompt: prompt tokens per request, none shared")
	fs.IntVar(&cfg.LongPrompt.OutputTokens, "long-output-tokens", bench.DefaultLongPromptOutput, "long-prompt: output tokens per request")
	fs.Float64Var(&cfg.LongPrompt.Rate, "long-rate", bench.DefaultLongPromptRate, "long-prompt: arrivals per simulated second (Poisson)")
	fs.DurationVar((*time.Duration)(&cfg.LongPrompt.KillAt), "long-kill-at", 0, "long-prompt: kill replica --long-kill-replica this long after the start (wall time; 0: none); in the pd topology replica 0 is a prefiller")
	fs.IntVar(&cfg.LongPrompt.KillReplica, "long-kill-replica", 0, "long-prompt: the replica --long-kill-at kills")
	fs.Float64Var(&cfg.Interference.Rate, "interfere-rate", 0, "agentic and trace: another client sends this many chat requests per second (of the simulated clock when embedded) straight to the engines, bypassing the gateway, counted apart (0: none)")
	fs.IntVar(&cfg.Interference.PromptTokens, "interfere-tokens", bench.DefaultInterferencePromptTokens, "interference: prompt tokens of each request, none shared")
	fs.IntVar(&cfg.BatchLoad.Lines, "batch-lines", 0, "a batch of this many chat completions submitted through the Batch API beside an agentic, trace, long-prompt or isolation run (isolation: as the burst starts), reported apart (0: none)")
	fs.IntVar(&cfg.BatchLoad.PromptTokens, "batch-prompt-tokens", bench.DefaultBatchPromptTokens, "batch: prompt tokens of each line")
	fs.IntVar(&cfg.BatchLoad.OutputTokens, "batch-output-tokens", bench.DefaultBatchOutputTokens, "batch: max_tokens of each line")
	fs.DurationVar((*time.Duration)(&cfg.BatchLoad.Deadline), "batch-deadline", time.Duration(bench.DefaultBatchDeadline), "batch: must be done this long after its submission; the run waits for it up to then")
	fs.StringVar(&cfg.BatchLoad.Key, "batch-key", "", "batch with --url: the API key it is submitted with")
	fs.IntVar(&cfg.Interference.Engines, "interfere-engines", bench.DefaultInterferenceEngines, "interference: how many engines it sends to (the first ones)")
	fs.DurationVar((*time.Duration)(&cfg.Overload.Duration), "overload-duration", bench.DefaultOverloadDuration, "overload: how long arrivals go on")
	fs.Float64Var(&cfg.Overload.InteractiveRate, "overload-interactive-rate", bench.DefaultOverloadInteractiveRate, "overload: interactive arrivals per simulated second (Poisson)")
	fs.Float64Var(&cfg.Overload.StandardRate, "overload-standard-rate", bench.DefaultOverloadStandardRate, "overload: standard arrivals per simulated second")
	fs.Float64Var(&cfg.Overload.BackgroundRate, "overload-background-rate", bench.DefaultOverloadBackgroundRate, "overload: background arrivals per simulated second")
	fs.IntVar(&cfg.Overload.PromptTokens, "overload-prompt-tokens", bench.DefaultOverloadPromptTokens, "overload: prompt tokens per request, none shared")
	fs.IntVar(&cfg.Chaos.Rounds, "chaos-rounds", 0, "chaos: kill rounds (0: as many as fit in --max-duration)")
	fs.DurationVar((*time.Duration)(&cfg.Chaos.RejoinGoal), "chaos-rejoin-goal", 0, "chaos: how soon a restarted replica should take traffic (0: the gateway's breaker timeout)")
	lendable := registerLendingFlags(fs, &cfg.Lending)
	registerLoRAFlags(fs, &cfg.LoRA, &sf.lora)
	registerAgentsFlags(fs, &cfg.Agents, &sf)
	sf.register(fs, "sim-", "sim-replicas")
	var gws embedded.Gateways
	registerGatewayFlags(fs, &gws)
	for _, d := range benchFleet {
		if f := fs.Lookup(d.flag); f != nil {
			f.Usage += fmt.Sprintf(" (agentic, trace and chaos: default %s; isolation: %s)", d.value, f.DefValue)
		}
	}
	restartOpts := registerRestartFlags(fs)
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	// gateway-restart and rollout run the agentic sessions
	// (bench/scenario/restart, bench/scenario/rollout).
	restartRun, rolloutRun := cfg.Workload == embedded.WorkloadGatewayRestart, cfg.Workload == embedded.WorkloadRollout
	if restartRun || rolloutRun {
		cfg.Workload = bench.WorkloadAgentic
	}
	if cfg.Workload == bench.WorkloadAgents {
		if err := agentsFleetDefaults(fs, cfg.Agents); err != nil {
			return err
		}
	}
	if err := benchFleetDefaults(fs, cfg.Workload); err != nil {
		return err
	}
	sf.policy = *policy
	if cfg.Model == "" {
		cfg.Model = sf.served
	}
	if cfg.Agentic.TimeScale == 0 && *url == "" && sf.timeScale > 0 {
		// Gaps run on the simulated clock, like the engines' steps.
		cfg.Agentic.TimeScale = sf.timeScale
	}
	if cfg.Workload == bench.WorkloadAgents && *url == "" {
		cfg.Agents.PrefillTokensPerSecond = embedded.PrefillRate(sf.accelerator, sf.model)
	}
	if *url == "" && sf.timeScale > 0 {
		// Arrivals on the simulated clock.
		cfg.LongPrompt.TimeScale = sf.timeScale
		cfg.Interference.TimeScale = sf.timeScale
		cfg.Overload.TimeScale = sf.timeScale
	}
	if *traceSpeed != 0 {
		if !(*traceSpeed > 0) || cfg.Trace.TimeScale != 0 {
			return fmt.Errorf("bench: --trace-speed must be positive and without --trace-time-scale")
		}
		cfg.Trace.TimeScale = 1 / *traceSpeed
		if *url == "" && sf.timeScale > 0 {
			cfg.Trace.TimeScale = sf.timeScale / *traceSpeed
		}
	}
	if cfg.Trace.TimeScale == 0 && *url == "" && sf.timeScale > 0 {
		// The trace's arrivals on the simulated clock, at half the rate
		// they were recorded at: the default fleet keeps up with that when
		// it reuses prefixes, and falls behind when it does not.
		cfg.Trace.TimeScale = 2 * sf.timeScale
	}
	if *repeat < 1 || *repeat > 1 && !strings.Contains(*compare, ",") {
		return fmt.Errorf("bench: --repeat %d: want 1, or more with --compare of two or more policies", *repeat)
	}
	if *url != "" && (*compare != "" || fs.Lookup("policy").Value.String() != "cache-aware") {
		return fmt.Errorf("bench: --compare and --policy need the embedded fleet; drop --url")
	}
	if cfg.Workload == bench.WorkloadChaos {
		if *url != "" || *compare != "" {
			return fmt.Errorf("bench: --workload chaos kills the embedded fleet's replicas; drop --url and --compare")
		}
		if cfg.Chaos.RejoinGoal == 0 {
			// One breaker timeout of the embedded gateway.
			var gw stack.Config
			gw.EnsureDefaults()
			cfg.Chaos.RejoinGoal = bench.Duration(gw.Fleet.BreakerOpenFor)
		}
	}
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var goRuntime stack.GoRuntime
	if *gatewayConfig != "" {
		if *url != "" {
			return fmt.Errorf("bench: --gateway-config configures the embedded gateway; drop --url")
		}
		if sf.gatewayConfig, err = os.ReadFile(*gatewayConfig); err != nil {
			return fmt.Errorf("bench: --gateway-config: %w", err)
		}
		c, err := stack.Decode(sf.gatewayConfig)
		if err != nil {
			return fmt.Errorf("bench: --gateway-config %s: %w", *gatewayConfig, err)
		}
		if len(c.Pools) > 0 {
			return fmt.Errorf("bench: --gateway-config %s: pools: the embedded fleet's are the gateway's; drop them", *gatewayConfig)
		}
		if restartRun || rolloutRun || cfg.Workload == bench.WorkloadLending {
			return fmt.Errorf("bench: --gateway-config: the gateway-restart, rollout and lending workloads start gateways of their own; drop it")
		}
		goRuntime = c.Runtime
	}
	if *url == "" {
		// The gateway runs in this process, as turnpike serve runs it.
		goRuntime.Apply(os.Getenv, log)
	}
	if restartRun {
		if *url != "" || *compare != "" {
			return fmt.Errorf("bench: --workload gateway-restart restarts embedded gateways; drop --url and --compare")
		}
		return sf.bench().GatewayRestart(ctx, cfg, &gws, *restartOpts, stdout, *out, log)
	}
	if rolloutRun {
		if *url != "" {
			return fmt.Errorf("bench: --workload rollout replaces the embedded fleet's replicas; drop --url")
		}
		modes := []string{embedded.RolloutWarmUp}
		if *compare != "" {
			modes = strings.Split(*compare, ",")
		}
		return sf.bench().Rollout(ctx, cfg, modes, *repeat, stdout, *out, log)
	}

	if cfg.Workload == bench.WorkloadLending {
		if *url != "" || *compare != "" {
			return fmt.Errorf("bench: --workload lending runs with and without lending on an embedded fleet of its own; drop --url and --compare")
		}
		if !flagSet(fs, "sim-replicas") {
			// One engine of its own: the background work offered is more
			// than it serves, so that lent capacity has work to take.
			sf.replicas = 1
		}
		return sf.bench().Lending(ctx, &cfg, *lendable, lendingMaxNumSeqs, stdout, *out, log)
	}
	var tenants bench.TenantRunner
	if (sf.apart && cfg.Workload == bench.WorkloadIsolation) || (sf.agentsProcess && cfg.Workload == bench.WorkloadAgents) {
		tenants = tenantProcess(stderr)
	}
	if *url != "" {
		t := bench.Target{BaseURL: *url, APIKey: *apiKey, KVCapacityTokens: *kvCapacity, Tenant: tenants}
		if *engineMetrics != "" {
			t.EngineMetricsURLs = strings.Split(*engineMetrics, ",")
		}
		if *interfereURLs != "" {
			t.EngineURLs = strings.Split(*interfereURLs, ",")
		}
		res, err := bench.Run(ctx, cfg, t)
		if err != nil {
			return err
		}
		return embedded.WriteResults(stdout, *out, res, nil)
	}

	embedded.Keys(&cfg)
	policies := []string{*policy}
	if *compare != "" {
		policies = strings.Split(*compare, ",")
	}
	sf.ttftTarget = *ttftTarget
	sf.flushInterval = *flushInterval
	fleet := sf.bench()
	start := func(ctx context.Context, entry string) (bench.Target, func() error, error) {
		t, stop, err := fleet.Start(ctx, entry, &gws, cfg, log)
		t.Tenant = tenants
		return t, stop, err
	}
	if len(policies) == 1 {
		t, stop, err := start(ctx, policies[0])
		if err != nil {
			return err
		}
		res, err := bench.Run(ctx, cfg, t)
		stop()
		if err != nil {
			return err
		}
		res.Policy = policies[0]
		return embedded.WriteResults(stdout, *out, res, nil)
	}
	cmp, err := bench.Compare(ctx, cfg, policies, *repeat, start)
	if err != nil {
		return err
	}
	return embedded.WriteResults(stdout, *out, nil, cmp)
}

// The CLI's agentic workload: the saturated regime where KV capacity, not
// compute, bounds the fleet. 32 sessions run at once, closed loop, each for
// 16 turns that add a 1000-token tool result, so contexts grow past 20k
// tokens; on the default bench fleet they fit in the replicas' KV caches
// when each session stays on one replica, and do not when every replica
// must hold every session.
const (
	benchSessions         = 64
	benchConcurrency      = 32
	benchTurns            = 16
	benchToolResultTokens = 1000
)

// benchFleet is the default simulated fleet of agentic and trace runs,
// where it differs from serve's demo fleet: llama-3.1-70b on MI300X leaves
// about 96k tokens of KV cache per replica beside the weights, and runs ten
// times faster than real time. The isolation scenario keeps serve's fleet.
var benchFleet = []struct{ flag, value string }{
	{"sim-accelerator", "mi300x"},
	{"sim-model", "llama-3.1-70b"},
	{"sim-served-model", "meta-llama/Llama-3.1-70B-Instruct"},
	{"sim-time-scale", "0.1"},
}

// benchFleetDefaults sets benchFleet's flags that the command line left
// unset, for every workload but isolation and long-prompt (which keep
// serve's fleet: an 8B model on H100s, real time); overload keeps real
// time.
func benchFleetDefaults(fs *flag.FlagSet, workload string) error {
	if workload == bench.WorkloadIsolation || workload == bench.WorkloadLongPrompt {
		return nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if workload == bench.WorkloadOverload {
		// The bench fleet on its own clock: a fleet ten times faster would
		// need ten times the arrivals, which the host could not send.
		set["sim-time-scale"] = true
	}
	for _, d := range benchFleet {
		if !set[d.flag] {
			if err := fs.Set(d.flag, d.value); err != nil {
				return err
			}
		}
	}
	return nil
}

// bench is the embedded fleet the flags describe, as the bench's
// workloads run it.
func (f *simFlags) bench() *embedded.Fleet {
	return &embedded.Fleet{
		New: func(topology string) (*sim.Topology, error) {
			g := *f
			if topology != "" {
				g.topology = topology
			}
			return g.fleet()
		},
		Topology: f.topology, Policy: f.policy,
		Sim: f.config(), Replicas: f.replicas,
		TimeScale: f.timeScale, TTFTTarget: f.ttftTarget, FlushInterval: f.flushInterval,
		Apart: f.apart, AgentsApart: f.agentsApart, LoRA: f.lora,
		GatewayConfig: f.gatewayConfig,
	}
}

// registerGatewayFlags adds the flags of active-active runs.
func registerGatewayFlags(fs *flag.FlagSet, g *embedded.Gateways) {
	fs.IntVar(&g.Count, "gateways", 1, "embedded: gateways on the one simulated fleet, behind a round-robin proxy, sharing state in Redis (more than 1 needs redis-server, or --redis-url); a --compare entry may name its own with a suffix: cache-aware@1gw,cache-aware@2gw (a @Ngw entry runs on Redis even with 1)")
	fs.StringVar(&g.RedisURL, "redis-url", "", "embedded with several gateways: the Redis they share (each run under a key prefix of its own); empty: start a redis-server on a private loopback port for each run")
}
