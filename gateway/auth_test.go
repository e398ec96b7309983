package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/state"
)

const testAdminToken = "admin-secret"

// memKV is the admin namespace of an in-memory state store.
func memKV(t *testing.T) state.Namespace {
	db := state.NewMemory()
	t.Cleanup(func() { db.Close() })
	return db.Namespace("m/admin/")
}

// tenancyServer wires auth and the admin Service the way New does: the
// tenant middleware on /v1, the admin middleware on /admin/v1, and the
// gateway's error handler. /v1/whoami answers the request's tenant.
func tenancyServer(t *testing.T, adminToken string, kv state.Namespace) (*echo.Echo, *pools.Registry) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg, err := pools.NewRegistry([]pools.PoolConfig{{
		Name:         "gpu",
		ServedModels: []string{"m"},
		Endpoints:    []pools.EndpointConfig{{URL: "http://127.0.0.1:8001"}},
	}}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	authn, err := auth.New(auth.Options{AdminToken: adminToken, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := admin.New(context.Background(), admin.Deps{Store: kv, Keys: authn, Registry: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{log: log, metrics: newMetrics(prometheus.NewRegistry(), reg, nil)}
	e := echo.New()
	e.HTTPErrorHandler = s.errorHandler
	v1 := e.Group("/v1", requireTenant(authn))
	v1.GET("/whoami", func(c echo.Context) error { return c.String(http.StatusOK, TenantOf(c)) })
	svc.Register(e.Group("/admin/v1", requireAdmin(authn)))
	return e, reg
}

// call sends a request with an Authorization header (none if empty).
func call(e *echo.Echo, method, path, authorization, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	if authorization != "" {
		req.Header.Set(echo.HeaderAuthorization, authorization)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

// TestTenancy walks a key's life through the admin API and the public API.
func TestTenancy(t *testing.T) {
	e, reg := tenancyServer(t, testAdminToken, memKV(t))
	vars := map[string]string{}
	expand := func(s string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, "{"+k+"}", v)
		}
		return s
	}
	adminAuth := "Bearer " + testAdminToken
	for _, tc := range []struct {
		name               string
		method, path, auth string
		body               string
		status             int
		code               string // the error code, for an error
		tenant             string // the body of /v1/whoami
		save               map[string]string
	}{
		{name: "open before any tenant", method: "GET", path: "/v1/whoami", status: 200, tenant: DefaultTenant},
		{name: "admin without token", method: "GET", path: "/admin/v1/tenants", status: 401, code: "invalid_admin_token"},
		{name: "admin with wrong token", method: "GET", path: "/admin/v1/tenants", auth: "Bearer nope", status: 401, code: "invalid_admin_token"},
		{name: "admin with token as basic", method: "GET", path: "/admin/v1/tenants", auth: "Basic " + testAdminToken, status: 401, code: "invalid_admin_token"},
		{name: "admin scheme in lower case", method: "GET", path: "/admin/v1/tenants", auth: "bearer " + testAdminToken, status: 200},
		{name: "create tenant", method: "POST", path: "/admin/v1/tenants", auth: adminAuth, body: `{"name":"acme"}`, status: 201},
		{name: "keys now required", method: "GET", path: "/v1/whoami", status: 401, code: "invalid_api_key"},
		{name: "create key", method: "POST", path: "/admin/v1/tenants/acme/keys", auth: adminAuth, status: 201,
			save: map[string]string{"secret": "secret", "id": "id"}},
		{name: "key on public route", method: "GET", path: "/v1/whoami", auth: "Bearer {secret}", status: 200, tenant: "acme"},
		{name: "unknown key", method: "GET", path: "/v1/whoami", auth: "Bearer tp-unknown", status: 401, code: "invalid_api_key"},
		{name: "admin token on public route", method: "GET", path: "/v1/whoami", auth: adminAuth, status: 401, code: "invalid_api_key"},
		{name: "tenant key on admin route", method: "GET", path: "/admin/v1/tenants", auth: "Bearer {secret}", status: 401, code: "invalid_admin_token"},
		{name: "tenant key cannot drain", method: "POST", path: "/admin/v1/endpoints/127.0.0.1:8001/drain", auth: "Bearer {secret}", status: 401},
		{name: "revoke key", method: "DELETE", path: "/admin/v1/tenants/acme/keys/{id}", auth: adminAuth, status: 200},
		{name: "revoked key", method: "GET", path: "/v1/whoami", auth: "Bearer {secret}", status: 401, code: "invalid_api_key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := call(e, tc.method, expand(tc.path), expand(tc.auth), tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.code != "" {
				var eb struct {
					Error struct {
						Type string  `json:"type"`
						Code *string `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == nil || *eb.Error.Code != tc.code || eb.Error.Type != "invalid_request_error" {
					t.Errorf("body %s, want code %s", rec.Body, tc.code)
				}
				if tc.status == 401 && rec.Header().Get("WWW-Authenticate") != "Bearer" {
					t.Errorf("no WWW-Authenticate: %v", rec.Header())
				}
			}
			if tc.tenant != "" && rec.Body.String() != tc.tenant {
				t.Errorf("tenant %q, want %q", rec.Body, tc.tenant)
			}
			if tc.save != nil {
				var out map[string]any
				json.Unmarshal(rec.Body.Bytes(), &out)
				for v, field := range tc.save {
					vars[v], _ = out[field].(string)
				}
			}
		})
	}
	if ep, _ := reg.Endpoint("127.0.0.1:8001"); ep.Draining() {
		t.Error("a tenant key drained an endpoint")
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	e, _ := tenancyServer(t, "", memKV(t))
	for _, auth := range []string{"", "Bearer anything"} {
		rec := call(e, "GET", "/admin/v1/tenants", auth, "")
		if rec.Code != http.StatusNotFound {
			t.Errorf("auth %q: status %d, want 404: %s", auth, rec.Code, rec.Body)
		}
	}
}

func TestAdminTokenAsHash(t *testing.T) {
	e, _ := tenancyServer(t, auth.HashKey(testAdminToken).String(), memKV(t))
	if rec := call(e, "GET", "/admin/v1/tenants", "Bearer "+testAdminToken, ""); rec.Code != 200 {
		t.Errorf("status %d: %s", rec.Code, rec.Body)
	}
	if rec := call(e, "GET", "/admin/v1/tenants", "Bearer "+auth.HashKey(testAdminToken).String(), ""); rec.Code != 401 {
		t.Errorf("the hash itself is not the token: status %d", rec.Code)
	}
	if _, err := auth.New(auth.Options{AdminToken: "sha256:zz"}); err == nil {
		t.Error("a malformed hash is accepted")
	}
}

// TestKeysSurviveRestart: a key created through the admin API works
// against a gateway started afresh on the same store.
func TestKeysSurviveRestart(t *testing.T) {
	kv := memKV(t)
	e, _ := tenancyServer(t, testAdminToken, kv)
	call(e, "POST", "/admin/v1/tenants", "Bearer "+testAdminToken, `{"name":"acme"}`)
	rec := call(e, "POST", "/admin/v1/tenants/acme/keys", "Bearer "+testAdminToken, "")
	var key struct{ Secret string }
	json.Unmarshal(rec.Body.Bytes(), &key)

	e2, _ := tenancyServer(t, testAdminToken, kv)
	if rec := call(e2, "GET", "/v1/whoami", "Bearer "+key.Secret, ""); rec.Code != 200 || rec.Body.String() != "acme" {
		t.Errorf("after restart: %d %s", rec.Code, rec.Body)
	}
	if rec := call(e2, "GET", "/v1/whoami", "", ""); rec.Code != 401 {
		t.Errorf("after restart, no key: %d, want 401", rec.Code)
	}
}

var _ AdminAPI = (*admin.Service)(nil)
