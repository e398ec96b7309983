package turnpike_test

import (
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	turnpike "github.com/turnpike-gateway/turnpike"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/batch"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/gateway"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
	"go.yaml.in/yaml/v3"
)

var (
	echoParam    = regexp.MustCompile(`:[A-Za-z_]+`)
	openAPIParam = regexp.MustCompile(`\{[A-Za-z_]+\}`)
)

// TestOpenAPICoversRoutes keeps openapi.yaml in step with the routes the
// gateway registers: every route is described, and nothing else is.
func TestOpenAPICoversRoutes(t *testing.T) {
	var spec struct {
		OpenAPI string                    `yaml:"openapi"`
		Paths   map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(turnpike.Spec, &spec); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(spec.OpenAPI, "3.1") {
		t.Errorf("openapi %q, want 3.1", spec.OpenAPI)
	}
	inSpec := map[string]bool{}
	for path, ops := range spec.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			inSpec[strings.ToUpper(method)+" "+openAPIParam.ReplaceAllString(path, "{}")] = true
		}
	}

	log := slog.New(slog.DiscardHandler)
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{"m"},
		Endpoints: []pools.EndpointConfig{{URL: "http://127.0.0.1:1"}}}}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.OpenPebble(t.TempDir(), state.PebbleOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := dispatch.New(dispatch.Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	svc := responses.New(responses.NewStore(db.Namespace("rs/"), responses.StoreOptions{}), d, responses.Config{CollectInterval: -1, Logger: log})
	defer svc.Close(context.Background())
	authn, err := auth.New(auth.Options{AdminToken: "admin-secret", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(t.Context(), admin.Deps{Store: db.Namespace("m/admin/"), Keys: authn, Registry: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	batches, err := batch.New(batch.Options{DB: db.Namespace("batch/"), Dispatch: d, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := gateway.New(gateway.Options{Registry: reg, Dispatch: d, Logger: log,
		Responses: svc, Batches: batches, Auth: authn, Admin: adm, OpenAPI: turnpike.Spec})
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, r := range srv.Routes() {
		// Echo registers its own catch-alls for unknown routes; they are
		// not part of the API.
		if r.Method == echoRouteNotFound || strings.HasSuffix(r.Path, "*") {
			continue
		}
		registered[r.Method+" "+echoParam.ReplaceAllString(r.Path, "{}")] = true
	}
	for r := range registered {
		if !inSpec[r] {
			t.Errorf("route %s is not in openapi.yaml", r)
		}
	}
	for r := range inSpec {
		if !registered[r] {
			t.Errorf("openapi.yaml describes %s, which the gateway does not serve", r)
		}
	}
	for _, want := range []string{http.MethodPost + " /v1/responses", http.MethodGet + " /admin/v1/tenants"} {
		if !slices.Contains(keys(registered), want) {
			t.Errorf("the gateway did not register %s: %v", want, keys(registered))
		}
	}
}

// TestOpenAPIRefsResolve: every $ref in openapi.yaml names a component the
// document defines.
func TestOpenAPIRefsResolve(t *testing.T) {
	var doc struct {
		Components map[string]map[string]any `yaml:"components"`
	}
	if err := yaml.Unmarshal(turnpike.Spec, &doc); err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`\$ref: "?#/components/(\w+)/(\w+)"?`).FindAllStringSubmatch(string(turnpike.Spec), -1)
	if len(refs) == 0 {
		t.Fatal("no $ref found; the pattern no longer matches the document")
	}
	for _, m := range refs {
		if _, ok := doc.Components[m[1]][m[2]]; !ok {
			t.Errorf("dangling $ref #/components/%s/%s", m[1], m[2])
		}
	}
}

const echoRouteNotFound = "echo_route_not_found"

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
