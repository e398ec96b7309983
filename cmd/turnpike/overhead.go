package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/bench/embedded"
	"github.com/turnpike-gateway/turnpike/stack"
)

// targetFlags collects repeated --target flags.
type targetFlags []bench.OverheadTarget

func (t *targetFlags) String() string { return fmt.Sprint(*t) }

func (t *targetFlags) Set(s string) error {
	v, err := bench.ParseOverheadTarget(s)
	if err != nil {
		return err
	}
	*t = append(*t, v)
	return nil
}

// overheadCmd is `turnpike bench overhead`: the proxy-overhead load
// generator that scripts/overhead.sh drives against processes it starts.
func overheadCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.OverheadConfig
	var targets targetFlags
	fs.Var(&targets, "target", "name=url[,pid=N]: a target to measure, and the process to charge its CPU to (repeatable, measured in this order)")
	fs.IntVar(&cfg.BodyBytes, "body-bytes", bench.DefaultOverheadBodyBytes, "size of each chat body, in bytes")
	fs.IntVar(&cfg.Concurrency, "concurrency", bench.DefaultOverheadConcurrency, "clients, each with one request in flight")
	fs.DurationVar((*time.Duration)(&cfg.Duration), "duration", bench.DefaultOverheadDuration, "measured length of each target's run in a round")
	fs.DurationVar((*time.Duration)(&cfg.Warmup), "warmup", bench.DefaultOverheadWarmup, "unmeasured run before each measured one")
	fs.IntVar(&cfg.Rounds, "rounds", bench.DefaultOverheadRounds, "runs of every target, in an order rotated each round")
	fs.BoolVar(&cfg.Stream, "stream", false, "ask for streamed answers")
	fs.StringVar(&cfg.Model, "model", bench.DefaultInstantModel, "model to request")
	fs.Int64Var(&cfg.Seed, "seed", bench.DefaultSeed, "seed of the bodies' text")
	fs.BoolVar(&cfg.Sessions, "sessions", false, "send x-session-id, one session per client")
	fs.StringVar(&cfg.Turns, "turns", bench.TurnsNext, "each client's requests: next (the next turn of its session, history plus one message), repeat (the same body) or cold (a new session each)")
	fs.DurationVar((*time.Duration)(&cfg.Timeout), "timeout", bench.DefaultOverheadTimeout, "bound on one request")
	fs.DurationVar((*time.Duration)(&cfg.Wait), "wait", bench.DefaultOverheadWait, "time each target gets to answer 200 before the first round")
	fs.IntVar(&cfg.BackendPID, "backend-pid", 0, "the engine's process, to report its CPU per request beside each target's (0: none)")
	out := fs.String("out", "bench-results/overhead", "directory for overhead.json and overhead.md")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if len(targets) == 0 {
		return errors.New("bench overhead: at least one --target is required")
	}
	return embedded.Overhead(ctx, cfg, targets, stdout, stderr, *out)
}

// engineCmd is `turnpike bench engine`: an engine that answers at once,
// to measure what stands in front of it.
func engineCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench engine", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.InstantConfig
	addr := fs.String("addr", "127.0.0.1:8001", "listen address")
	fs.StringVar(&cfg.Model, "model", bench.DefaultInstantModel, "served model name")
	fs.IntVar(&cfg.OutputTokens, "output-tokens", bench.DefaultInstantOutputTokens, "tokens in every answer; one event each when streamed")
	fs.IntVar(&cfg.NumGPUBlocks, "num-gpu-blocks", bench.DefaultInstantNumGPUBlocks, "KV capacity reported in /metrics, in 16-token blocks")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "instant engine serving %s on http://%s; stop with Ctrl-C\n", cfg.Model, ln.Addr())
	return embedded.ServeUntil(ctx, ln, bench.NewInstantEngine(cfg))
}

// proxyCmd runs Go's standard reverse proxy (net/http/httputil) in front
// of one upstream, with no routing and no parsing: what any gateway built
// on net/http pays at least, for scripts/overhead.sh to set beside turnpike.
func proxyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8002", "listen address")
	upstream := fs.String("upstream", "", "the URL requests are sent to (required)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		fmt.Fprintf(stderr, "bench proxy: --upstream %q: want an http:// or https:// URL\n", *upstream)
		return errUsage
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "reverse proxy on http://%s to %s; stop with Ctrl-C\n", ln.Addr(), u)
	return embedded.ServeUntil(ctx, ln, stack.RoundRobin([]*url.URL{u}))
}
