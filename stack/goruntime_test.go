package stack

import (
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/gateway"
)

const runtimePools = "pools:\n  - name: p\n    engine: vllm\n    servedModels: [m]\n    endpoints:\n      - url: http://127.0.0.1:1\n"

func TestRuntimeConfig(t *testing.T) {
	cfg, err := Parse([]byte(runtimePools))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Runtime.GCPercent != DefaultGCPercent || cfg.Runtime.MemoryLimit != 0 {
		t.Errorf("defaults: %+v", cfg.Runtime)
	}
	cfg, err = Parse([]byte(runtimePools + "runtime:\n  gcPercent: 150\n  memoryLimit: 1073741824\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Runtime.GCPercent != 150 || cfg.Runtime.MemoryLimit != 1<<30 {
		t.Errorf("not read: %+v", cfg.Runtime)
	}
	_, err = Parse([]byte(runtimePools + "runtime:\n  gcPercent: -5\n  memoryLimit: -1\n"))
	if err == nil || !strings.Contains(err.Error(), "runtime.gcPercent") || !strings.Contains(err.Error(), "runtime.memoryLimit") {
		t.Errorf("bad values: %v", err)
	}
	if _, err = Parse([]byte(runtimePools + "runtime:\n  gcPercent: -1\n")); err == nil || !strings.Contains(err.Error(), "needs runtime.memoryLimit") {
		t.Errorf("collector off with no limit: %v", err)
	}
	if _, err = Parse([]byte(runtimePools + "runtime:\n  gcPercent: -1\n  memoryLimit: 1073741824\n")); err != nil {
		t.Errorf("collector off under a limit: %v", err)
	}
}

// TestRuntimeApply checks that the config sets the collector, and that
// GOGC and GOMEMLIMIT in the environment win over it.
func TestRuntimeApply(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	noEnv := func(string) string { return "" }
	noCgroup := func(string) ([]byte, error) { return nil, os.ErrNotExist }

	GoRuntime{}.apply(noEnv, noCgroup, log)
	if got := debug.SetGCPercent(100); got != DefaultGCPercent {
		t.Errorf("default: GC percent %d, want %d", got, DefaultGCPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("default: memory limit %d, want it unchanged (%d)", got, limit)
	}
	// In a container with a 2 GiB limit, 90% of it by default; a limit
	// set in the file or the environment wins.
	cgroup := func(f string) ([]byte, error) {
		if f == cgroupMemoryFiles[0] {
			return []byte("2147483648\n"), nil
		}
		return nil, os.ErrNotExist
	}
	GoRuntime{}.apply(noEnv, cgroup, log)
	if got := debug.SetMemoryLimit(limit); got != 2<<30/10*9 {
		t.Errorf("in a 2 GiB container: memory limit %d, want %d", got, int64(2<<30/10*9))
	}
	GoRuntime{MemoryLimit: 1 << 30}.apply(noEnv, cgroup, log)
	if got := debug.SetMemoryLimit(limit); got != 1<<30 {
		t.Errorf("in a 2 GiB container with runtime.memoryLimit 1 GiB: memory limit %d", got)
	}
	GoRuntime{}.apply(func(k string) string { return map[string]string{"GOMEMLIMIT": "1GiB"}[k] }, cgroup, log)
	if got := debug.SetMemoryLimit(limit); got != limit {
		t.Errorf("in a container with GOMEMLIMIT set: memory limit %d, want it unchanged", got)
	}
	GoRuntime{GCPercent: 250, MemoryLimit: 3 << 30}.Apply(noEnv, log)
	if got := debug.SetGCPercent(100); got != 250 {
		t.Errorf("GC percent %d, want 250", got)
	}
	if got := debug.SetMemoryLimit(limit); got != 3<<30 {
		t.Errorf("memory limit %d, want %d", got, int64(3<<30))
	}
	env := map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}
	GoRuntime{GCPercent: 250, MemoryLimit: 3 << 30}.Apply(func(k string) string { return env[k] }, log)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent %d, want the environment's 100", got)
	}
	if got := debug.SetMemoryLimit(limit); got != limit {
		t.Errorf("with GOMEMLIMIT set: memory limit %d, want it unchanged (%d)", got, limit)
	}
}

// TestContainerMemoryLimit: the limit is read from cgroup v2, else v1;
// "max" and v1's unlimited value are no limit.
func TestContainerMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		v2, v1 string // "" for no such file
		want   int64
	}{
		{"1073741824\n", "", 1 << 30},
		{"max\n", "", 0},
		{"", "536870912\n", 512 << 20},
		{"", "9223372036854771712\n", 0},
		{"", "", 0},
	} {
		read := func(f string) ([]byte, error) {
			v := map[string]string{cgroupMemoryFiles[0]: c.v2, cgroupMemoryFiles[1]: c.v1}[f]
			if v == "" {
				return nil, os.ErrNotExist
			}
			return []byte(v), nil
		}
		if got := containerMemoryLimit(read); got != c.want {
			t.Errorf("v2 %q, v1 %q: %d, want %d", c.v2, c.v1, got, c.want)
		}
	}
}

// TestBodyBudgetConfig (issue 32): bodyBudget is read and checked
// against bodyLimit, and by default is a quarter of the Go memory limit
// in force, or the gateway's default without one.
func TestBodyBudgetConfig(t *testing.T) {
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(limit) })

	cfg, err := Parse([]byte(runtimePools + "bodyBudget: 1073741824\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.bodyBudget(); got != 1<<30 {
		t.Errorf("bodyBudget %d, want 1 GiB", got)
	}
	for _, bad := range []string{"bodyBudget: -1\n", "bodyBudget: 1048576\n", "bodyLimit: 4194304\nbodyBudget: 2097152\n"} {
		if _, err := Parse([]byte(runtimePools + bad)); err == nil || !strings.Contains(err.Error(), "bodyBudget") {
			t.Errorf("%q: %v", bad, err)
		}
	}

	cfg, err = Parse([]byte(runtimePools))
	if err != nil {
		t.Fatal(err)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if got := cfg.bodyBudget(); got != gateway.DefaultBodyBudget {
		t.Errorf("no memory limit: bodyBudget %d, want %d", got, gateway.DefaultBodyBudget)
	}
	debug.SetMemoryLimit(8 << 30) // as runtime.memoryLimit or GOMEMLIMIT set it
	if got := cfg.bodyBudget(); got != 2<<30 {
		t.Errorf("under an 8 GiB memory limit: bodyBudget %d, want 2 GiB", got)
	}
}
