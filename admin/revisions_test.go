package admin_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestRevisionsRoutes: a model's canary weights are read and changed at
// runtime through the admin API, and the table the dispatcher assigns new
// sessions by follows.
func TestRevisionsRoutes(t *testing.T) {
	fleet, err := pools.NewRegistry([]pools.PoolConfig{{Name: "gpu", ServedModels: []string{"m"}, Endpoints: []pools.EndpointConfig{
		{URL: "http://127.0.0.1:8001", Revision: "old"}, {URL: "http://127.0.0.1:8002", Revision: "new"},
	}}}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	revs, err := affinity.NewRevisions(map[string]affinity.RevisionPolicy{"m": {Weights: map[string]int{"new": 10, "old": 90}}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := admin.New(context.Background(), admin.Deps{Store: memKV(t), Keys: &keyring{}, Registry: fleet, Revisions: revs})
	if err != nil {
		t.Fatal(err)
	}
	e := newEcho()
	svc.Register(e.Group("/admin/v1"))
	f := &fixture{e: e}

	status, body := f.do(t, "GET", "/admin/v1/models/m/revisions", "")
	if status != 200 || jsonOf(body["weights"]) != `{"new":10,"old":90}` || jsonOf(body["serving"]) != `{"new":1,"old":1}` {
		t.Fatalf("GET: %d %v", status, body)
	}
	status, body = f.do(t, "PUT", "/admin/v1/models/m/revisions", `{"weights":{"new":50,"old":50}}`)
	if status != 200 || jsonOf(body["weights"]) != `{"new":50,"old":50}` {
		t.Fatalf("PUT: %d %v", status, body)
	}
	if p, _ := revs.Policy("m"); p.Weights["new"] != 50 {
		t.Errorf("the dispatcher's table has %v after the PUT", p.Weights)
	}
	for _, tc := range []struct{ name, method, path, body string }{
		{"negative weight", "PUT", "/admin/v1/models/m/revisions", `{"weights":{"new":-1}}`},
		{"unknown field", "PUT", "/admin/v1/models/m/revisions", `{"weight":{"new":1}}`},
	} {
		if status, body := f.do(t, tc.method, tc.path, tc.body); status != 400 {
			t.Errorf("%s: %d %v, want 400", tc.name, status, body)
		}
	}
	if status, _ := f.do(t, "GET", "/admin/v1/models/nope/revisions", ""); status != 404 {
		t.Errorf("unknown model: %d, want 404", status)
	}
	status, body = f.do(t, "DELETE", "/admin/v1/models/m/revisions", "")
	if _, ok := revs.Policy("m"); status != 200 || ok || body["weights"] != nil {
		t.Errorf("DELETE: %d %v; the table still has a policy: %v", status, body, ok)
	}

	// Without a table the routes say so.
	svc2, err := admin.New(context.Background(), admin.Deps{Store: memKV(t), Keys: &keyring{}, Registry: fleet})
	if err != nil {
		t.Fatal(err)
	}
	e2 := newEcho()
	svc2.Register(e2.Group("/admin/v1"))
	req := httptest.NewRequest("GET", "/admin/v1/models/m/revisions", strings.NewReader(""))
	rec := httptest.NewRecorder()
	e2.ServeHTTP(rec, req)
	if rec.Code != 501 {
		t.Errorf("without revisions: %d, want 501", rec.Code)
	}
}

// jsonOf is v as compact JSON, keys sorted.
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
