package admin_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"go.yaml.in/yaml/v3"

	"github.com/turnpike-gateway/turnpike/admin"
)

// TestOpenAPIFragment keeps openapi-admin.yaml in step with Register: the
// same routes, and every $ref pointing at something the fragment defines.
func TestOpenAPIFragment(t *testing.T) {
	b, err := os.ReadFile("openapi-admin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]map[string]any `yaml:"paths"`
		Components map[string]map[string]any `yaml:"components"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	var spec []string
	for path, ops := range doc.Paths {
		for m := range ops {
			if m != "parameters" {
				spec = append(spec, strings.ToUpper(m)+" "+path)
			}
		}
	}
	svc, err := admin.New(t.Context(), admin.Deps{Store: &admin.MemKV{}, Keys: &keyring{}})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	svc.Register(e.Group("/admin/v1"))
	param := regexp.MustCompile(`:(\w+)`)
	var routes []string
	for _, r := range e.Routes() {
		routes = append(routes, r.Method+" "+param.ReplaceAllString(r.Path, "{$1}"))
	}
	slices.Sort(spec)
	slices.Sort(routes)
	if !slices.Equal(spec, routes) {
		t.Errorf("routes and openapi-admin.yaml differ\nroutes: %q\nspec:   %q", routes, spec)
	}
	for _, m := range regexp.MustCompile(`\$ref: "#/components/(\w+)/(\w+)"`).FindAllStringSubmatch(string(b), -1) {
		if _, ok := doc.Components[m[1]][m[2]]; !ok {
			t.Errorf("dangling $ref %s/%s", m[1], m[2])
		}
	}
}
