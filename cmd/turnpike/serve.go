package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/bench/embedded"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
	"github.com/turnpike-gateway/turnpike/state"
)

// Embedded demo fleet defaults.
const (
	defaultSimReplicas    = 4
	defaultSimAccelerator = "h100"
	defaultSimModel       = "llama-3.1-8b"
	defaultSimServedModel = "meta-llama/Llama-3.1-8B-Instruct"
)

// simFlags describe the embedded simulated fleet.
type simFlags struct {
	replicas    int
	accelerator string
	model       string
	served      string
	flavor      string
	timeScale   float64
	numBlocks   int
	// KV tiers below HBM, in blocks per replica (shared: per pool).
	kvCPUBlocks, kvDiskBlocks, kvSharedBlocks int
	// topology is aggregated, pd, hbm, cpu-tier or mixed; prefill the P/D topology's prefill
	// replicas (0: half).
	topology string
	prefill  int
	// policy is bench's --policy, for --compare entries naming a
	// topology.
	policy string
	// scheduling is the engines' scheduling policy (sim.Config).
	scheduling string
	// tokenizer is a model directory whose chat template and tokenizer
	// the engines (and the gateway's pool) use; "" keeps the simulator's
	// documented rules.
	tokenizer string
	// ttftTarget is bench's --ttft-target, flushInterval its
	// --flush-interval, on the simulated clock.
	ttftTarget, flushInterval time.Duration
	// apart is bench's --isolation-processes; agentsApart its
	// --engines-apart, agentsProcess its --agents-process.
	apart, agentsApart, agentsProcess bool
	// gatewayConfig is bench's --gateway-config file's contents.
	gatewayConfig []byte
	// lora is bench's lora workload's fleet.
	lora embedded.LoRAFleet
}

// register adds the flags, named prefix+name; the replica count is
// registered under replicasFlag.
func (f *simFlags) register(fs *flag.FlagSet, prefix, replicasFlag string) {
	fs.IntVar(&f.replicas, replicasFlag, defaultSimReplicas, "number of simulated engines")
	fs.StringVar(&f.accelerator, prefix+"accelerator", defaultSimAccelerator, "simulated accelerator (a catalog name)")
	fs.StringVar(&f.model, prefix+"model", defaultSimModel, "simulated model profile")
	fs.StringVar(&f.served, prefix+"served-model", defaultSimServedModel, "model name the simulated engines serve")
	fs.StringVar(&f.flavor, prefix+"flavor", sim.FlavorVLLM, "engine flavour: vllm, vllm-tpu (vLLM on TPU, the KV cache series spelt as before their rename) or sglang")
	fs.Float64Var(&f.timeScale, prefix+"time-scale", 1, "simulated time per real second: 0.1 runs ten times faster")
	fs.IntVar(&f.numBlocks, prefix+"num-blocks", 0, "KV blocks per replica (0: from accelerator and model)")
	fs.IntVar(&f.kvCPUBlocks, prefix+"kv-cpu-blocks", 0, "KV blocks of host memory per replica that blocks evicted from HBM move to (0: none)")
	fs.IntVar(&f.kvDiskBlocks, prefix+"kv-disk-blocks", 0, "KV blocks of local disk per replica, below the CPU tier (0: none)")
	fs.IntVar(&f.kvSharedBlocks, prefix+"kv-shared-blocks", 0, "KV blocks of a store shared by every replica of the pool, below the local tiers (0: none)")
	fs.StringVar(&f.scheduling, prefix+"scheduling-policy", sim.SchedulingFCFS, "engines' scheduling policy, as vLLM's --scheduling-policy: fcfs, or priority (each request's priority field first, lowest value first; an embedded fleet's pool then sets priorityScheduling and runs without the interactive lane)")
	fs.StringVar(&f.tokenizer, prefix+"tokenizer", "", "model directory (tokenizer.json or .json.gz, tokenizer_config.json): the engines render chats with its chat template and tokenize with it, as a real engine of the model would; the embedded fleet's pool then uses tokenizer kind hf with it")
	if prefix != "" {
		fs.StringVar(&f.topology, prefix+"topology", sim.TopologyAggregated, "aggregated (every replica prefills and decodes), pd (a prefill pool and a decode pool, disaggregated by the gateway), hbm (aggregated, no KV tier below HBM) cpu-tier (aggregated, with a CPU tier of --"+prefix+"kv-cpu-blocks, default "+fmt.Sprint(sim.DefaultCPUTierFactor)+"× HBM) or mixed (an H200 pool and a TPU v6e pool of one model, half the replicas each)")
		fs.IntVar(&f.prefill, prefix+"prefill", 0, "pd topology: how many of the replicas prefill (0: half)")
	}
}

// fleet describes the embedded fleet the flags ask for.
func (f *simFlags) fleet() (*sim.Topology, error) {
	cfg := f.config()
	if f.tokenizer != "" {
		tok, err := stack.LoadSimTokenizer(f.tokenizer)
		if err != nil {
			return nil, err
		}
		cfg.Tokenizer = tok
	}
	t, err := sim.NewTopology(f.topology, cfg, f.replicas, f.prefill)
	if err != nil {
		return nil, err
	}
	t.TokenizerDir = f.tokenizer
	t.Spawn = simProcess
	return t, nil
}

// simProcess is `turnpike sim` with args in a child of this binary, for
// the engines of a fleet apart (sim.Topology.Apart).
func simProcess(ctx context.Context, args []string) (*exec.Cmd, error) {
	return child(ctx, os.Stderr, 10*time.Second, append([]string{"sim"}, args...)...)
}

func (f *simFlags) config() sim.Config {
	return sim.Config{
		Flavor:           f.flavor,
		Accelerator:      f.accelerator,
		Model:            f.model,
		ServedModelName:  f.served,
		TimeScale:        f.timeScale,
		NumBlocks:        f.numBlocks,
		KVCPUBlocks:      f.kvCPUBlocks,
		KVDiskBlocks:     f.kvDiskBlocks,
		KVSharedBlocks:   f.kvSharedBlocks,
		SchedulingPolicy: f.scheduling,
		// Each engine publishes its KV events on a port of its own.
		KVEventsAddr: "tcp://127.0.0.1:0",
	}
}

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (YAML); none: run with an embedded simulated fleet")
	addr := fs.String("addr", "", "listen address (default "+stack.DefaultAddr+", or the config's addr)")
	dataDir := fs.String("data-dir", "", "state directory (default "+stack.DefaultDataDir+", or the config's dataDir)")
	stateURL := fs.String("state-url", "", "keep state in the Redis at this URL (redis:// or rediss://) instead of Pebble under the data dir")
	policy := fs.String("policy", "", "routing policy: round-robin, least-loaded, session-hash, cache-aware or cost-aware (default cache-aware, or the config's routing.policy)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	var aliases modelAliases
	fs.Var(&aliases, "model-alias", "NAME=MODEL: answer requests for NAME with the served MODEL (models.aliases; repeatable; wins over the file's)")
	var sf simFlags
	sf.register(fs, "sim-", "sim-replicas")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}

	var cfg *stack.Config
	if *configPath != "" {
		if cfg, err = stack.Load(*configPath); err != nil {
			return err
		}
		for _, w := range cfg.Warnings() {
			log.Warn(w, "path", *configPath)
		}
	} else {
		cfg = &stack.Config{}
		cfg.EnsureDefaults()
		// No load balancer in front of the demo to wait for.
		cfg.Server.ShutdownDelay = -1
	}
	// The flags win over the file, at start and at every reload.
	flags := func(cfg *stack.Config) {
		if *addr != "" {
			cfg.Addr = *addr
		}
		if *dataDir != "" {
			cfg.DataDir = *dataDir
		}
		if *stateURL != "" {
			cfg.State.Backend, cfg.State.URL = state.BackendRedis, *stateURL
		}
		if *policy != "" {
			cfg.Routing.Policy = *policy
		}
		for name, target := range aliases {
			if cfg.Models.Aliases == nil {
				cfg.Models.Aliases = map[string]string{}
			}
			cfg.Models.Aliases[name] = target
		}
	}
	flags(cfg)
	// The embedded fleet's config is validated once its pools exist
	// (Stack.Start); a file's here, with the flags over it.
	if (*policy != "" || *stateURL != "" || len(aliases) > 0) && *configPath != "" {
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	cfg.Runtime.Apply(os.Getenv, log)
	opts := stack.Options{Logger: log, ConfigPath: *configPath, Adjust: flags}
	if *configPath == "" {
		if opts.Fleet, err = sf.fleet(); err != nil {
			return err
		}
	}
	// SIGHUP reloads the config file; registered before the stack
	// starts, so that an early one is not the default's: the end of the
	// process.
	hup := make(chan os.Signal, 1)
	if *configPath != "" {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	st, err := stack.New(cfg, opts)
	if err != nil {
		return err
	}
	if err := st.Start(ctx); err != nil {
		return err
	}
	if opts.Fleet != nil {
		printDemo(stdout, st, &sf, cfg.Where())
	} else {
		log.Info("turnpike serving", "addr", "http://"+st.Addr(), "pools", len(cfg.Pools), "policy", cfg.Routing.Policy, "state", cfg.Where())
	}
	return serveUntilSignal(ctx, st, hup, log)
}

// modelAliases is the --model-alias flag: NAME=MODEL, repeatable.
type modelAliases map[string]string

func (m *modelAliases) String() string { return fmt.Sprint(map[string]string(*m)) }

func (m *modelAliases) Set(v string) error {
	name, target, ok := strings.Cut(v, "=")
	if name, target = strings.TrimSpace(name), strings.TrimSpace(target); !ok || name == "" || target == "" {
		return fmt.Errorf("want NAME=MODEL, not %q", v)
	}
	if *m == nil {
		*m = modelAliases{}
	}
	(*m)[name] = target
	return nil
}

// serveUntilSignal reloads the config at every SIGHUP on hup, and on
// SIGTERM or SIGINT (ctx ending) shuts the stack down gracefully: /readyz
// fails first, the gateway serves on for server.shutdownDelay, then drains
// (Stack.Shutdown).
func serveUntilSignal(ctx context.Context, st *stack.Stack, hup <-chan os.Signal, log *slog.Logger) error {
	for {
		select {
		case <-hup:
			log.Info("SIGHUP: reloading the config file")
			st.Reload(ctx, stack.TriggerSignal)
		case <-ctx.Done():
			return st.Shutdown(context.Background())
		case err := <-st.Served():
			st.Close(context.Background())
			return err
		}
	}
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func printDemo(w io.Writer, st *stack.Stack, sf *simFlags, stateAt string) {
	base := "http://" + st.Addr()
	flavor, accelerator := sf.flavor, sf.accelerator
	if sf.topology == sim.TopologyMixed {
		flavor, accelerator = "vllm and vllm-tpu", "h200 and tpu-v6e"
	}
	fmt.Fprintf(w, `turnpike is serving on %[1]s
  embedded fleet: %[2]d simulated %[3]s replicas of %[4]s on %[5]s (time scale %[6]g)
  state: %[8]s; metrics at %[1]s/metrics

Try it:
  curl %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%[7]s","messages":[{"role":"user","content":"Hello!"}]}'

  curl -N %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%[7]s","stream":true,"messages":[{"role":"user","content":"Hello!"}]}'

  curl %[1]s/v1/responses -H 'Content-Type: application/json' \
    -d '{"model":"%[7]s","input":"Hello!"}'

OpenAI SDKs: base URL %[1]s/v1, any API key.
Stop with Ctrl-C.
`, base, sf.replicas, flavor, sf.model, accelerator, sf.timeScale, sf.served, stateAt)
	ps := st.Pools()
	if st.Fleet() != nil && len(ps) > 1 && ps[0].Role != pools.RolePrefill {
		fmt.Fprintf(w, "\nmixed topology: pool %s (%d × %s) and pool %s (%d × %s) serve one model; the cost-aware policy (--policy cost-aware) sends each turn to the cheaper one while it meets the TTFT target.\n",
			ps[0].Name, len(ps[0].Endpoints), ps[0].Accelerator, ps[1].Name, len(ps[1].Endpoints), ps[1].Accelerator)
	} else if st.Fleet() != nil && len(ps) > 1 {
		fmt.Fprintf(w, "\nP/D topology: pools %s (%d) and %s (%d); long prompts are prefilled on the first and decoded on the second (see turnpike_pd_decisions_total).\n",
			ps[0].Name, len(ps[0].Endpoints), ps[1].Name, len(ps[1].Endpoints))
	}
}
