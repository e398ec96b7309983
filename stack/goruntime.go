package stack

import (
	"errors"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// GoRuntime tunes the Go runtime under the gateway: its garbage
// collector. GOGC in the environment wins over gcPercent, and GOMEMLIMIT
// over memoryLimit, as for any Go program.
type GoRuntime struct {
	// GCPercent is GOGC: how far the heap may grow past what the last
	// collection left live, in percent, before the next collection.
	// Default 400. Most of what a turn allocates (its body's decode, its
	// prompt's block hashes, its answer's events) is dead once the turn
	// ends, while the live heap (the prompt memo, the KV index, sessions)
	// is small, so Go's default of 100 collects several times a second
	// under load; 400 takes a few percent less CPU a request for a heap
	// up to five times what is live (docs/benchmarks.md, "Proxy
	// overhead"). -1
	// turns the collector off but for MemoryLimit.
	GCPercent int `yaml:"gcPercent"`
	// MemoryLimit is GOMEMLIMIT, in bytes: a soft limit on the Go
	// runtime's memory, under which the collector works harder rather
	// than let the heap grow past it. Default: 90% of the memory limit
	// of the container the gateway runs in (its cgroup's memory.max, or
	// memory.limit_in_bytes under cgroup v1), so that the heap GCPercent
	// allows does not get the process killed; none outside a container
	// with a limit.
	MemoryLimit int64 `yaml:"memoryLimit"`
}

// DefaultGCPercent is GoRuntime.GCPercent's default.
const DefaultGCPercent = 400

// EnsureDefaults fills unset fields.
func (g *GoRuntime) EnsureDefaults() {
	if g.GCPercent == 0 {
		g.GCPercent = DefaultGCPercent
	}
}

// Validate reports a value the runtime cannot take.
func (g *GoRuntime) Validate() error {
	var errs []error
	if g.GCPercent < -1 {
		errs = append(errs, errors.New("runtime.gcPercent: must be -1 (off) or more than 0"))
	}
	if g.GCPercent == -1 && g.MemoryLimit <= 0 {
		// Nothing would ever collect: the heap would grow until the
		// process is killed. (A GOMEMLIMIT of the environment's is not
		// counted: the file alone must be safe.)
		errs = append(errs, errors.New("runtime.gcPercent: -1 (off) needs runtime.memoryLimit"))
	}
	if g.MemoryLimit < 0 {
		errs = append(errs, errors.New("runtime.memoryLimit: must not be negative"))
	}
	return errors.Join(errs...)
}

// Apply sets the collector as g says, where the environment (getenv) does
// not: the process's own GOGC or GOMEMLIMIT is the operator's word.
func (g GoRuntime) Apply(getenv func(string) string, log *slog.Logger) {
	g.apply(getenv, os.ReadFile, log)
}

// apply is Apply, reading the cgroup's files with readFile.
func (g GoRuntime) apply(getenv func(string) string, readFile func(string) ([]byte, error), log *slog.Logger) {
	g.EnsureDefaults()
	if v := getenv("GOGC"); v != "" {
		log.Info("go runtime: GOGC from the environment, over runtime.gcPercent", "GOGC", v)
	} else {
		debug.SetGCPercent(g.GCPercent)
	}
	switch v := getenv("GOMEMLIMIT"); {
	case v != "":
		log.Info("go runtime: GOMEMLIMIT from the environment, over runtime.memoryLimit", "GOMEMLIMIT", v)
	case g.MemoryLimit > 0:
		debug.SetMemoryLimit(g.MemoryLimit)
	default:
		if c := containerMemoryLimit(readFile); c > 0 {
			l := c / 10 * 9
			debug.SetMemoryLimit(l)
			log.Info("go runtime: memory limit 90% of the container's", "container", c, "limit", l)
		}
	}
}

// cgroupMemoryFiles hold the memory limit of the container the process
// runs in: cgroup v2's, then v1's.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// noCgroupLimit is above any real limit: cgroup v1 reports an unlimited
// group as the largest page-aligned int64.
const noCgroupLimit = 1 << 60

// containerMemoryLimit is the memory limit of the process's cgroup, in
// bytes, or 0 when there is none ("max", or no cgroup file).
func containerMemoryLimit(readFile func(string) ([]byte, error)) int64 {
	for _, f := range cgroupMemoryFiles {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= noCgroupLimit {
			return 0 // "max": no limit
		}
		return n
	}
	return 0
}

// memoryLimit is the Go runtime's memory limit in force (GoRuntime's
// MemoryLimit once applied, or GOMEMLIMIT), in bytes; 0 when there is
// none.
func memoryLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return l
	}
	return 0
}
