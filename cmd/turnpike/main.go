// Command turnpike is the gateway binary: `turnpike` (or `turnpike serve`)
// runs the gateway, `turnpike sim` runs simulated engines, `turnpike bench`
// runs the load generator. Logic lives in the packages; this is flags,
// config and wiring.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	_ "time/tzdata" // lending schedules name IANA time zones; hosts may lack zoneinfo
)

const usage = `turnpike — an OpenAI-compatible gateway for fleets of LLM model servers.

Usage:
  turnpike [serve] [flags]   run the gateway (no --config: with an embedded simulated fleet)
  turnpike sim [flags]       run simulated engines on their own ports
  turnpike bench [flags]     run the load generator against a gateway or the embedded fleet
  turnpike bench overhead    measure proxies in front of an instant engine (scripts/overhead.sh)
  turnpike bench engine      run an engine that answers at once
  turnpike bench proxy       run Go's standard reverse proxy in front of one upstream
  turnpike bench tenant      one isolation tenant's requests, spec on stdin (started by turnpike bench)

Run 'turnpike <command> -h' for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "turnpike:", err)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveCmd(ctx, args, stdout, stderr)
	case "sim":
		return simCmd(ctx, args, stdout, stderr)
	case "bench":
		if len(args) > 0 {
			switch args[0] {
			case "overhead":
				return overheadCmd(ctx, args[1:], stdout, stderr)
			case "engine":
				return engineCmd(ctx, args[1:], stdout, stderr)
			case "proxy":
				return proxyCmd(ctx, args[1:], stdout, stderr)
			case "tenant":
				return tenantCmd(ctx, os.Stdin, stdout)
			}
		}
		return benchCmd(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
	return errUsage
}
