package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/turnpike-gateway/turnpike/bench"
)

// Overhead runs the proxy-overhead load generator against targets,
// progress to stderr, and writes overhead.json and overhead.md to out and
// the text report to stdout.
func Overhead(ctx context.Context, cfg bench.OverheadConfig, targets []bench.OverheadTarget, stdout, stderr io.Writer, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	res, err := bench.RunOverhead(ctx, cfg, targets, stderr)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "overhead.json"), b, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(out, "overhead.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nresults: %s/overhead.json, %s/overhead.md\n", out, out)
	return nil
}

// ServeUntil serves h on ln until ctx ends, then shuts down within 5s:
// the instant engine and the reverse proxy the overhead bench measures.
func ServeUntil(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
