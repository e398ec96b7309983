package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/stack"
)

// simCmd runs simulated engines on their own listeners until interrupted.
func simCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	host := fs.String("host", "127.0.0.1", "listen host")
	basePort := fs.Int("base-port", 8001, "port of the first engine; the others follow (0: ephemeral ports)")
	kvEventsBase := fs.Int("kv-events-base-port", 0, "if set, engine i publishes KV events on tcp://host:(port+i)")
	errorRate := fs.Float64("error-rate", 0, "fraction of requests answered with an injected error")
	reasoning := fs.Bool("reasoning", false, "serve a reasoning model: chat answers stream reasoning_content before the content")
	role := fs.String("role", sim.RoleBoth, "prefill/decode role: prefill (holds KV for remote decoders), decode (pulls it) or both")
	kvLease := fs.Duration("kv-lease", sim.DefaultKVLease, "prefill role: how long prefilled KV is held for a decoder, in simulated time")
	kvEvents := fs.Bool("kv-events", false, "publish KV events, each engine on an ephemeral port (printed); --kv-events-base-port chooses the ports instead")
	first := fs.Int("first-engine", 0, "number the engines from this one (their names and seeds): the later part of a fleet split over processes")
	reportJSON := fs.Bool("report-json", false, "print the engines as one line of JSON once they serve (url, kv_events, kv_capacity_tokens), instead of the lines for people")
	var sf simFlags
	sf.register(fs, "", "n")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	var err error
	cfg := sf.config()
	cfg.ErrorRate = *errorRate
	cfg.Reasoning = *reasoning
	cfg.Role = *role
	cfg.KVLease = *kvLease
	cfg.KVEventsAddr = ""
	if sf.tokenizer != "" {
		if cfg.Tokenizer, err = stack.LoadSimTokenizer(sf.tokenizer); err != nil {
			return err
		}
	}
	switch {
	case *kvEventsBase != 0:
		cfg.KVEventsAddr = fmt.Sprintf("tcp://%s:%d", *host, *kvEventsBase)
	case *kvEvents:
		cfg.KVEventsAddr = "tcp://" + net.JoinHostPort(*host, "0")
	}
	f, err := sim.StartFleetFrom(ctx, *first, sf.replicas, cfg, *host, *basePort)
	if err != nil {
		return err
	}
	defer f.Close()
	if *reportJSON {
		if err := json.NewEncoder(stdout).Encode(f.Replicas()); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	for i, u := range f.URLs {
		line := fmt.Sprintf("engine %s  %s  (%s %s on %s, role %s, %d KV blocks)", f.Engines[i].Config().Name, u, sf.flavor, sf.model, sf.accelerator, cfg.Role, f.Engines[i].NumBlocks())
		if c := f.Engines[i].Config(); c.KVCPUBlocks+c.KVDiskBlocks+c.KVSharedBlocks > 0 {
			line += fmt.Sprintf(", below HBM: %d CPU, %d disk, %d shared", c.KVCPUBlocks, c.KVDiskBlocks, c.KVSharedBlocks)
		}
		if a := f.Engines[i].KVEventsAddr(); a != "" {
			line += "  kv events " + a
		}
		fmt.Fprintln(stdout, line)
	}
	fmt.Fprintln(stdout, "serving; stop with Ctrl-C")
	<-ctx.Done()
	return nil
}
