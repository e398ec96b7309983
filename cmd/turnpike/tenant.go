package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/bench"
)

// tenantCmd is `turnpike bench tenant`, which the isolation and agents
// scenarios start: one tenant's requests of one run (an isolation
// tenant's, or every agent of an agents run), its bench.TenantSpec read
// from stdin, each request written to stdout as a line of JSON as it ends
// (the batch's tenant writes its report at the batch's end). In a process
// of its own, a tenant's load generator takes no Go scheduler time from
// the other's, nor from the gateway, as a tenant on other machines would
// not, and the gateway's process's CPU and memory are its own.
func tenantCmd(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	var spec bench.TenantSpec
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&spec); err != nil {
		return fmt.Errorf("bench tenant: reading the spec from stdin: %w", err)
	}
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	var encErr error
	err := bench.RunTenant(ctx, spec, func(l bench.TenantLine) {
		if encErr == nil {
			// One line a request, flushed as it ends: the parent's
			// progress follows the run.
			if encErr = enc.Encode(l); encErr == nil {
				encErr = w.Flush()
			}
		}
	})
	if err != nil {
		return err
	}
	return encErr
}

// tenantProcess runs spec in a `turnpike bench tenant` child of this
// binary. Cancelling ctx interrupts the child, which then ends the
// requests in flight and exits.
func tenantProcess(stderr io.Writer) bench.TenantRunner {
	// Both tenants' children write to stderr at once.
	stderr = &lockedWriter{w: stderr}
	return func(ctx context.Context, spec bench.TenantSpec, record func(bench.TenantLine)) error {
		in, err := json.Marshal(spec)
		if err != nil {
			return err
		}
		cmd, err := child(ctx, stderr, 30*time.Second, "bench", "tenant")
		if err != nil {
			return err
		}
		cmd.Stdin = bytes.NewReader(in)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("tenant %s process: %w", spec.Tenant, err)
		}
		// Every line is read before Wait, which closes the pipe.
		var readErr error
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l bench.TenantLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				readErr = fmt.Errorf("tenant %s process: its report: %w", spec.Tenant, err)
				break
			}
			record(l)
		}
		if readErr == nil {
			readErr = sc.Err()
		}
		io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			return fmt.Errorf("tenant %s process: %w", spec.Tenant, err)
		}
		return readErr
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// child is a command that runs this binary with args, its stderr to
// stderr: cancelling ctx interrupts it, as Ctrl-C would, and kills it if
// it has not exited waitDelay later.
func child(ctx context.Context, stderr io.Writer, waitDelay time.Duration, args ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = waitDelay
	return cmd, nil
}
