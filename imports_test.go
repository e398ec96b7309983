package turnpike_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/turnpike-gateway/turnpike/"

// floors is the import rule of the design: floors run downward. A package
// may import only the packages of ours listed for it.
var floors = map[string][]string{
	// The assembly: filled by init with every package below cmd.
	"stack":            {},
	"gateway":          {"affinity", "apierror", "auth", "dispatch", "internal/jsonscan", "pools", "prompt", "responses", "responses/api", "responses/wire", "state", "tracing"},
	"admin":            {"apierror", "auth", "turns", "pools", "sessions", "state", "internal/wait"},
	"responses":        {"apierror", "dispatch", "gossip", "internal/jsonscan", "internal/lru", "jobs", "prompt", "responses/mcpclient", "responses/wire", "state", "tracing", "internal/wait"},
	"responses/wire":   {"apierror", "internal/jsonscan"},
	"batch":            {"apierror", "dispatch", "jobs", "prompt", "state", "internal/wait"},
	"dispatch":         {"turns", "budgets", "affinity", "sessions", "pools", "kv", "models", "prompt", "apierror", "tracing", "internal/jsonscan", "internal/lru", "internal/netwake", "guard"},
	"models":           {},
	"guard":            {"prompt"},
	"prompt":           {"internal/jsonscan", "internal/lru"},
	"prompt/hf":        {"internal/heap", "internal/lru", "prompt"},
	"prompt/enginetok": {"prompt"},
	"jobs":             {"internal/wait", "state"},
	"jobs/jobstest":    {"state"},
	"sessions":         {"internal/lru", "kv", "state"},
	"turns":            {"internal/heap", "pools"},
	"budgets":          {"state", "turns"},
	"affinity":         {"kv", "sessions", "pools"},
	"kv":               {"gossip", "internal/lru", "internal/netwake", "internal/wait"},
	"apierror":         {},
	"auth":             {},
	"state":            {},
	"state/redistest":  {},
	"tracing":          {},
	"pools":            {"accelerators", "accelerators/enginemetrics", "gossip", "internal/filewatch", "internal/netwake", "internal/wait"},
	"gossip":           {},
	"accelerators":     {},
	"accelerators/sim": {"accelerators", "accelerators/enginemetrics", "internal/lru"},
	"bench":            {"accelerators/enginemetrics", "bench/driver", "bench/overhead", "bench/report", "bench/scenario/agents", "bench/scenario/chaos", "bench/scenario/isolation", "bench/scenario/lending", "bench/scenario/lora", "bench/scenario/overload", "bench/scrape", "bench/workload", "internal/lru"},
	// bench's parts import nothing of ours outside bench but what bench may.
	"bench/workload":           {},
	"bench/scrape":             {"accelerators/enginemetrics"},
	"bench/driver":             {"bench/scrape", "bench/workload", "internal/lru"},
	"bench/scenario/agents":    {"bench/driver", "bench/workload"},
	"bench/scenario/chaos":     {"bench/driver", "bench/scrape", "bench/workload"},
	"bench/scenario/isolation": {"bench/driver", "bench/scrape", "bench/workload"},
	"bench/scenario/lending":   {"bench/driver", "bench/scrape", "bench/workload"},
	"bench/scenario/lora":      {"accelerators/enginemetrics", "bench/driver", "bench/scrape", "bench/workload"},
	"bench/scenario/overload":  {"bench/driver", "bench/workload"},
	"bench/scenario/rollout":   {"bench/driver", "bench/scrape", "bench/workload"},
	"bench/scenario/restart":   {"bench/driver", "bench/workload"},
	"bench/report":             {"bench/driver", "bench/scenario/agents", "bench/scenario/chaos", "bench/scenario/isolation", "bench/scenario/lending", "bench/scenario/lora", "bench/scenario/overload", "bench/scrape", "bench/workload"},
	"bench/overhead":           {"accelerators/enginemetrics", "bench/driver", "bench/report", "bench/workload"},
	// The bench's runs on embedded gateways, between cmd and the assembly:
	// filled by init with the assembly, what it may import, and bench's
	// packages.
	"bench/embedded": {},
	// responses' parts below it: the client of the MCP servers its tool loop calls.
	"responses/mcpclient": {"responses/wire"},
	// The MCP server of the client's and the API's tests.
	"responses/mcpclient/mcptest": {},
	// responses' HTTP handlers and WebSocket protocol, which the gateway mounts.
	"responses/api": {"apierror", "budgets", "dispatch", "prompt", "responses", "responses/wire", "tracing"},
	// The engines' metric names, the one spelling for pools, sim and bench.
	"accelerators/enginemetrics": {},
	// Machinery with no domain, under internal/: it imports nothing of ours.
	"internal/lru":       {},
	"internal/heap":      {},
	"internal/jsonscan":  {},
	"internal/wait":      {},
	"internal/filewatch": {},
	"internal/netwake":   {},
	// A real kube-apiserver and etcd for tests.
	"internal/kubetest": {},
	"internal/heaptest": {},
	// The gateway's and responses/api's test fixture (tests alone import
	// it): a Responses stack over simulated engines, with no gateway.
	"internal/gatewaytest": {"accelerators/sim", "affinity", "dispatch", "pools", "responses", "state"},
	// The Helm chart's tests (test files alone).
	"deploy/helm": {},
}

// The assembly (stack) may import every package below cmd but the load
// generator and its parts; none but cmd and bench/embedded (the bench's
// runs on gateways it starts) imports it, as no other floor lists it.
// bench/embedded may import the assembly, what the assembly may, and the
// load generator's packages; only cmd imports it.
func init() {
	for pkg := range floors {
		if pkg != "stack" && pkg != "bench" && !strings.HasPrefix(pkg, "bench/") {
			floors["stack"] = append(floors["stack"], pkg)
		}
	}
	floors["bench/embedded"] = append(slices.Clone(floors["stack"]), "stack")
	for pkg := range floors {
		if (pkg == "bench" || strings.HasPrefix(pkg, "bench/")) && pkg != "bench/embedded" {
			floors["bench/embedded"] = append(floors["bench/embedded"], pkg)
		}
	}
}

// TestEveryPackageHasAFloor: a new package must take its place in floors.
func TestEveryPackageHasAFloor(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" || path == "cmd") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || filepath.Dir(path) == "." {
			return nil
		}
		if _, ok := floors[filepath.ToSlash(filepath.Dir(path))]; !ok {
			t.Errorf("package %s has no entry in floors", filepath.Dir(path))
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestImportFloors reads every non-test file of every package and fails on
// an import that runs back up the floors.
func TestImportFloors(t *testing.T) {
	fset := token.NewFileSet()
	for pkg, allowed := range floors {
		files, err := filepath.Glob(filepath.Join(filepath.FromSlash(pkg), "*.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("%s: no Go files (%v); update the floors", pkg, err)
			continue
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			ast, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range ast.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				ours, ok := strings.CutPrefix(path, module)
				if !ok {
					continue
				}
				if !slices.Contains(allowed, ours) {
					t.Errorf("%s imports %s, above its floor (allowed: %v)", f, ours, allowed)
				}
			}
		}
	}
}
