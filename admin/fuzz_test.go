package admin_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/apierror"
)

// FuzzAdminBodies sends arbitrary bodies to every admin route that reads
// one: whatever arrives, the answer is a success or a client error in the
// OpenAI shape, never a server error or a crash.
func FuzzAdminBodies(f *testing.F) {
	routes := []struct{ method, path string }{
		{http.MethodPost, "/admin/v1/tenants"},
		{http.MethodPatch, "/admin/v1/tenants/acme"},
		{http.MethodPost, "/admin/v1/tenants/acme/keys"},
		{http.MethodPut, "/admin/v1/flowcontrol"},
		{http.MethodPut, "/admin/v1/bands"},
	}
	for i, body := range []string{
		`{"name":"beta","weight":2,"maxBand":"standard","quota":{"requestsPerMinute":60}}`,
		`{"quota":{"concurrent":8},"defaultBand":"background"}`,
		`{"name":"ci"}`,
		`{"maxInFlightPerEndpoint":32,"shed":{"start":0.8,"full":1},"bands":{"interactive":{"ttl":"15s"}}}`,
		`{"interactive":{"ttl":"5s","maxQueued":10}}`,
		`{"name":"a/b"}`, `{`, ``, `[]`, `null`, `{"weight":1e400}`, `{"bands":{"standard":{"ttl":"-1s"}}}`,
	} {
		f.Add(uint8(i), []byte(body))
	}
	fx := newFixture(f, nil, admin.Config{})
	// do is fx.do, failing the input instead of hanging on it.
	do := func(t *testing.T, method, path, body string) (int, map[string]any) {
		type answer struct {
			code int
			out  map[string]any
		}
		done := make(chan answer, 1)
		go func() { c, o := fx.do(t, method, path, body); done <- answer{c, o} }()
		select {
		case a := <-done:
			return a.code, a.out
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s %q: no answer in 10s", method, path, body)
			return 0, nil
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		if code, _ := do(t, http.MethodPost, "/admin/v1/tenants", `{"name":"acme"}`); code != 201 && code != 409 {
			t.Fatalf("creating the fixture's tenant: %d", code)
		}
		r := routes[int(route)%len(routes)]
		code, out := do(t, r.method, r.path, string(body))
		if code >= 500 {
			t.Fatalf("%s %s %q: %d %v", r.method, r.path, body, code, out)
		}
		if code >= 400 && (lookup(out, "error.message") == nil || lookup(out, "error.type") == nil) {
			t.Fatalf("%s %s %q: %d without an OpenAI-shaped error: %v", r.method, r.path, body, code, out)
		}
		// Leave the fixture as it was, so inputs stay independent.
		if id, ok := out["id"].(string); ok && code == 201 && r.path == "/admin/v1/tenants/acme/keys" {
			do(t, http.MethodDelete, "/admin/v1/tenants/acme/keys/"+id, "")
		}
		if name, ok := out["name"].(string); ok && code == 201 && r.path == "/admin/v1/tenants" && name != "acme" {
			do(t, http.MethodDelete, "/admin/v1/tenants/"+url.PathEscape(name), "")
		}
	})
}

// FuzzLendBodies feeds arbitrary bodies to the lending parsers: each
// either opens a lease that ends in the future within MaxLendWindow, with
// a grace within MaxReclaimDeadline, or answers an OpenAI-shaped 400.
func FuzzLendBodies(f *testing.F) {
	for _, body := range []string{
		`{"until":"2030-01-01T00:00:00Z"}`, `{"duration":"10m","reclaimDeadline":"30s"}`, `{"deadline":"5s"}`,
		`{"duration":"-1s"}`, `{"until":"2030-01-01T00:00:00+25:00"}`, `{"duration":"9999999h"}`, `{`, ``, `null`, `[]`, `{"until":1}`,
	} {
		f.Add([]byte(body))
	}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		l, err := admin.ParseLend(body, now)
		if err == nil {
			if !l.Admits(now) || l.Until.Sub(now) > admin.MaxLendWindow || l.Grace < 0 || l.Grace > admin.MaxReclaimDeadline {
				t.Fatalf("%q: lease %+v out of bounds", body, l)
			}
		} else if e, ok := err.(*apierror.Error); !ok || e.Status != http.StatusBadRequest {
			t.Fatalf("%q: error %T %v, want an OpenAI-shaped 400", body, err, err)
		}
		d, set, err := admin.ParseReclaim(body)
		if err == nil {
			if d < 0 || d > admin.MaxReclaimDeadline || (!set && d != 0) {
				t.Fatalf("%q: reclaim deadline %v, %v", body, d, set)
			}
		} else if e, ok := err.(*apierror.Error); !ok || e.Status != http.StatusBadRequest {
			t.Fatalf("%q: reclaim error %T %v, want an OpenAI-shaped 400", body, err, err)
		}
	})
}
