package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/turns"
)

// keyring is a KeyPublisher that keeps the last snapshot.
type keyring struct {
	mu      sync.Mutex
	open    bool
	tenants map[auth.KeyHash]string
}

func (k *keyring) SetKeys(open bool, tenants map[auth.KeyHash]string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.open, k.tenants = open, tenants
}

// tenant is whom secret authenticates as, "" for nobody.
func (k *keyring) tenant(secret string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tenants[auth.HashKey(secret)]
}

func (k *keyring) snapshot() (bool, map[auth.KeyHash]string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.open, maps.Clone(k.tenants)
}

// memKV is the admin namespace of an in-memory state store.
func memKV(t testing.TB) state.Namespace {
	db := state.NewMemory()
	t.Cleanup(func() { db.Close() })
	return db.Namespace("m/admin/")
}

// fixture is a Service over an in-memory store, real flow control, a
// fleet of two endpoints and a session store, mounted on a bare Echo.
type fixture struct {
	svc      *admin.Service
	kv       state.Namespace
	keys     *keyring
	flow     *turns.Controller
	reg      *pools.Registry
	sessions *sessions.Store
	e        *echo.Echo
}

func newFixture(t testing.TB, kv state.Namespace, cfg admin.Config) *fixture {
	t.Helper()
	return newFixtureWith(t, kv, cfg, []pools.PoolConfig{{
		Name:         "gpu",
		ServedModels: []string{"m"},
		Endpoints:    []pools.EndpointConfig{{URL: "http://127.0.0.1:8001"}, {URL: "http://127.0.0.1:8002"}},
	}}, nil, nil)
}

// newFixtureWith is newFixture over the pools pcs, registering metrics
// on reg when it is not nil, on the clock now when it is not nil.
func newFixtureWith(t testing.TB, kv state.Namespace, cfg admin.Config, pcs []pools.PoolConfig, reg prometheus.Registerer, now func() time.Time) *fixture {
	t.Helper()
	if kv == nil {
		kv = memKV(t)
	}
	flow, err := turns.New(turns.Config{})
	if err != nil {
		t.Fatal(err)
	}
	flow.Start(context.Background())
	t.Cleanup(func() { flow.Close(context.Background()) })
	fleet, err := pools.NewRegistry(pcs, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := sessions.NewStore(sessions.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{kv: kv, keys: &keyring{}, flow: flow, reg: fleet, sessions: ss}
	f.svc, err = admin.New(context.Background(), admin.Deps{
		Store:    kv,
		Keys:     f.keys,
		Flow:     flow,
		Registry: fleet,
		Sessions: ss,
		Config:   cfg,
		Metrics:  reg,
		Now:      now,
		Getenv:   func(name string) string { return map[string]string{"ACME_KEY": "tp-acme-secret"}[name] },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.e = newEcho()
	f.svc.Register(f.e.Group("/admin/v1"))
	return f
}

// do sends a request and decodes the answer into a generic JSON value.
func (f *fixture) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	rec := httptest.NewRecorder()
	f.e.ServeHTTP(rec, req)
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %v\n%s", method, path, err, rec.Body)
		}
	}
	return rec.Code, out
}

// lookup follows a dotted path ("error.param", "data.0.name") into a JSON value.
func lookup(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i := 0
			for _, c := range p {
				i = i*10 + int(c-'0')
			}
			if i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// step is one request of a scenario and what its answer must hold.
type step struct {
	name   string
	method string
	path   string
	body   string
	status int
	// want maps dotted paths of the answer to their expected values,
	// compared as fmt would print them.
	want map[string]string
}

func run(t *testing.T, f *fixture, steps []step) {
	t.Helper()
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			status, out := f.do(t, s.method, s.path, s.body)
			if status != s.status {
				t.Fatalf("%s %s: status %d, want %d: %v", s.method, s.path, status, s.status, out)
			}
			for p, want := range s.want {
				if got := jsonString(lookup(out, p)); got != want {
					t.Errorf("%s: got %s, want %s (answer %v)", p, got, want, out)
				}
			}
		})
	}
}

func jsonString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestTenantCRUD(t *testing.T) {
	f := newFixture(t, nil, admin.Config{})
	run(t, f, []step{
		{name: "empty list", method: "GET", path: "/admin/v1/tenants", status: 200,
			want: map[string]string{"object": "list", "data": "[]"}},
		{name: "create", method: "POST", path: "/admin/v1/tenants", body: `{"name":"acme","weight":2,"maxBand":"standard","quota":{"requestsPerMinute":60}}`, status: 201,
			want: map[string]string{"name": "acme", "weight": "2", "defaultBand": "standard", "maxBand": "standard", "quota.requestsPerMinute": "60", "source": "api"}},
		{name: "create duplicate", method: "POST", path: "/admin/v1/tenants", body: `{"name":"acme"}`, status: 409,
			want: map[string]string{"error.code": "tenant_exists", "error.param": "name"}},
		{name: "create bad name", method: "POST", path: "/admin/v1/tenants", body: `{"name":"a/b"}`, status: 400,
			want: map[string]string{"error.param": "name", "error.type": "invalid_request_error"}},
		// Open mode's data is stored as tenant "default": a tenant of that
		// name would read it (issue 32, item 5).
		{name: "create reserved name", method: "POST", path: "/admin/v1/tenants", body: `{"name":"default"}`, status: 400,
			want: map[string]string{"error.param": "name", "error.type": "invalid_request_error"}},
		{name: "create bad weight", method: "POST", path: "/admin/v1/tenants", body: `{"name":"b","weight":-1}`, status: 400,
			want: map[string]string{"error.param": "weight"}},
		{name: "create bad band", method: "POST", path: "/admin/v1/tenants", body: `{"name":"b","maxBand":"urgent"}`, status: 400},
		{name: "create unknown field", method: "POST", path: "/admin/v1/tenants", body: `{"name":"b","wieght":1}`, status: 400,
			want: map[string]string{"error.param": "wieght"}},
		{name: "create not JSON", method: "POST", path: "/admin/v1/tenants", body: `{`, status: 400},
		{name: "create empty body", method: "POST", path: "/admin/v1/tenants", status: 400},
		{name: "get", method: "GET", path: "/admin/v1/tenants/acme", status: 200,
			want: map[string]string{"name": "acme", "weight": "2"}},
		{name: "get missing", method: "GET", path: "/admin/v1/tenants/nobody", status: 404,
			want: map[string]string{"error.code": "tenant_not_found"}},
		{name: "update merges", method: "PATCH", path: "/admin/v1/tenants/acme", body: `{"quota":{"concurrent":8}}`, status: 200,
			want: map[string]string{"weight": "2", "quota.requestsPerMinute": "60", "quota.concurrent": "8"}},
		{name: "update invalid", method: "PATCH", path: "/admin/v1/tenants/acme", body: `{"quota":{"concurrent":-1}}`, status: 400,
			want: map[string]string{"error.param": "quota.concurrent", "error.message": "quota.concurrent: -1 is negative"}},
		{name: "update rename", method: "PATCH", path: "/admin/v1/tenants/acme", body: `{"name":"other"}`, status: 400,
			want: map[string]string{"error.param": "name"}},
		{name: "list", method: "GET", path: "/admin/v1/tenants", status: 200,
			want: map[string]string{"data.0.name": "acme", "data.0.quota.concurrent": "8"}},
		{name: "delete", method: "DELETE", path: "/admin/v1/tenants/acme", status: 200,
			want: map[string]string{"id": "acme", "deleted": "true"}},
		{name: "delete again", method: "DELETE", path: "/admin/v1/tenants/acme", status: 404},
	})
}

// TestTenantsReachFlowControl checks that a change is in force at once.
func TestTenantsReachFlowControl(t *testing.T) {
	f := newFixture(t, nil, admin.Config{})
	if open, _ := f.keys.snapshot(); !open {
		t.Fatal("no tenants: want open")
	}
	run(t, f, []step{
		{name: "create", method: "POST", path: "/admin/v1/tenants", body: `{"name":"acme","weight":3,"defaultBand":"background"}`, status: 201},
	})
	if got := f.flow.Tenant("acme"); got.Weight != 3 || got.DefaultBand != turns.Background {
		t.Errorf("flow control sees %+v", got)
	}
	if open, _ := f.keys.snapshot(); open {
		t.Error("a tenant exists: want keys required")
	}
	run(t, f, []step{{name: "delete", method: "DELETE", path: "/admin/v1/tenants/acme", status: 200}})
	if got := f.flow.Tenant("acme"); got.Weight != turns.DefaultTenantWeight {
		t.Errorf("deleted tenant still has %+v", got)
	}
}

func TestKeys(t *testing.T) {
	f := newFixture(t, nil, admin.Config{})
	ctx := context.Background()
	if _, err := f.svc.CreateTenant(ctx, turns.Tenant{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	status, created := f.do(t, "POST", "/admin/v1/tenants/acme/keys", `{"name":"ci"}`)
	if status != 201 {
		t.Fatalf("create key: %d %v", status, created)
	}
	secret, _ := created["secret"].(string)
	id, _ := created["id"].(string)
	t.Run("secret", func(t *testing.T) {
		if !strings.HasPrefix(secret, auth.KeyPrefix) || len(secret) != len(auth.KeyPrefix)+43 {
			t.Errorf("secret %q: want tp- and 32 bytes base64url", secret)
		}
		if p, _ := created["prefix"].(string); !strings.HasPrefix(secret, p) || len(p) >= len(secret)/2 {
			t.Errorf("prefix %q of %q", p, secret)
		}
	})
	t.Run("published", func(t *testing.T) {
		if got := f.keys.tenant(secret); got != "acme" {
			t.Errorf("key authenticates as %q", got)
		}
	})
	t.Run("list shows no secret", func(t *testing.T) {
		status, out := f.do(t, "GET", "/admin/v1/tenants/acme/keys", "")
		b, _ := json.Marshal(out)
		if status != 200 || strings.Contains(string(b), secret) || lookup(out, "data.0.id") != id || lookup(out, "data.0.name") != "ci" {
			t.Errorf("%d %s", status, b)
		}
		if lookup(out, "data.0.createdAt") == nil {
			t.Errorf("no createdAt: %s", b)
		}
	})
	t.Run("store holds only the hash", func(t *testing.T) {
		f.kv.Scan(ctx, state.Range{}, func(k, v []byte) error {
			if strings.Contains(string(v), secret) {
				t.Errorf("%s holds the secret: %s", k, v)
			}
			return nil
		})
	})
	run(t, f, []step{
		{name: "revoke other tenant's", method: "DELETE", path: "/admin/v1/tenants/nobody/keys/" + id, status: 404},
		{name: "revoke unknown", method: "DELETE", path: "/admin/v1/tenants/acme/keys/key_0", status: 404,
			want: map[string]string{"error.code": "key_not_found"}},
		{name: "revoke", method: "DELETE", path: "/admin/v1/tenants/acme/keys/" + id, status: 200,
			want: map[string]string{"deleted": "true"}},
	})
	if got := f.keys.tenant(secret); got != "" {
		t.Errorf("revoked key authenticates as %q", got)
	}
	t.Run("delete tenant revokes its keys", func(t *testing.T) {
		_, secret, err := f.svc.CreateKey(ctx, "acme", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.svc.DeleteTenant(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if got := f.keys.tenant(secret); got != "" {
			t.Errorf("key of a deleted tenant authenticates as %q", got)
		}
		n := 0
		f.kv.Scan(ctx, state.Prefix([]byte("keys/")), func(_, _ []byte) error { n++; return nil })
		if n != 0 {
			t.Errorf("%d keys left in the store", n)
		}
	})
}

func TestFlowControl(t *testing.T) {
	f := newFixture(t, nil, admin.Config{})
	run(t, f, []step{
		{name: "get defaults", method: "GET", path: "/admin/v1/flowcontrol", status: 200,
			want: map[string]string{"source": "config", "flowControl.bands.interactive.ttl": "30s", "flowControl.holdAt": "1"}},
		{name: "put invalid", method: "PUT", path: "/admin/v1/flowcontrol", body: `{"shed":{"start":0.9,"full":2}}`, status: 400,
			want: map[string]string{"error.param": "shed.full", "error.code": "invalid_value", "error.message": "shed.full: 2 is not in (start, 1]"}},
		{name: "put with two problems", method: "PUT", path: "/admin/v1/flowcontrol", body: `{"holdAt":2,"shed":{"start":0.9,"full":2}}`, status: 400,
			want: map[string]string{"error.param": "shed.full", "error.message": "shed.full: 2 is not in (start, 1]; holdAt: 2 is not in (0, 1]"}},
		{name: "put invalid band", method: "PUT", path: "/admin/v1/flowcontrol", body: `{"bands":{"standard":{"minShare":0.7}}}`, status: 400,
			want: map[string]string{"error.param": "bands.standard.minShare"}},
		{name: "put unknown field", method: "PUT", path: "/admin/v1/flowcontrol", body: `{"holdat":0.5}`, status: 400},
		{name: "put duration as number", method: "PUT", path: "/admin/v1/flowcontrol", body: `{"tickInterval":5}`, status: 400},
		{name: "put", method: "PUT", path: "/admin/v1/flowcontrol", body: `{"holdAt":0.9,"bands":{"interactive":{"ttl":"10s"}}}`, status: 200,
			want: map[string]string{"source": "api", "flowControl.holdAt": "0.9", "flowControl.bands.interactive.ttl": "10s", "flowControl.bands.standard.ttl": "1m0s"}},
	})
	if got := f.flow.Config(); got.HoldAt != 0.9 || got.Bands.Interactive.TTL != 10*time.Second {
		t.Errorf("not in force: %+v", got)
	}
	run(t, f, []step{
		{name: "put bands", method: "PUT", path: "/admin/v1/bands", body: `{"background":{"maxQueued":7}}`, status: 200,
			want: map[string]string{"flowControl.background.maxQueued": "7", "flowControl.interactive.ttl": "30s"}},
		{name: "put bands invalid", method: "PUT", path: "/admin/v1/bands", body: `{"standard":{"ttl":"-1s"}}`, status: 400,
			want: map[string]string{"error.param": "bands.standard.ttl"}},
		{name: "get bands", method: "GET", path: "/admin/v1/bands", status: 200,
			want: map[string]string{"flowControl.background.maxQueued": "7"}},
	})
	if got := f.flow.Config(); got.HoldAt != 0.9 || got.Bands.Background.MaxQueued != 7 {
		t.Errorf("bands put lost the rest: %+v", got)
	}
	run(t, f, []step{
		{name: "delete reverts to the file", method: "DELETE", path: "/admin/v1/flowcontrol", status: 200,
			want: map[string]string{"source": "config", "flowControl.holdAt": "1"}},
	})
}

func TestFlowControlPersists(t *testing.T) {
	kv := memKV(t)
	f := newFixture(t, kv, admin.Config{})
	run(t, f, []step{{name: "put", method: "PUT", path: "/admin/v1/flowcontrol", body: `{"maxInFlightPerEndpoint":9}`, status: 200}})
	g := newFixture(t, kv, admin.Config{})
	if got := g.flow.Config().MaxInFlightPerEndpoint; got != 9 {
		t.Errorf("after reload: maxInFlightPerEndpoint %d, want 9", got)
	}
	if _, over, _ := g.svc.FlowControl(); !over {
		t.Error("after reload: not marked as saved through the API")
	}
}

func TestEndpoints(t *testing.T) {
	f := newFixture(t, nil, admin.Config{})
	ep, _ := f.reg.Endpoint("127.0.0.1:8002")
	ep.SetLoad(pools.Load{Running: 3, Waiting: 1, KVUsage: 0.5, ScrapedAt: time.Now()})
	run(t, f, []step{
		{name: "pools", method: "GET", path: "/admin/v1/pools", status: 200,
			want: map[string]string{"data.0.name": "gpu", "data.0.endpoints.1.id": "127.0.0.1:8002", "data.0.endpoints.1.load.running": "3", "data.0.endpoints.1.breaker": "closed"}},
		{name: "endpoints", method: "GET", path: "/admin/v1/endpoints", status: 200,
			want: map[string]string{"data.1.load.kvUsage": "0.5", "data.1.load.stale": "false", "data.0.load.stale": "true", "data.0.inFlight": "0", "data.0.healthy": "true"}},
		{name: "drain", method: "POST", path: "/admin/v1/endpoints/127.0.0.1:8002/drain", status: 200,
			want: map[string]string{"draining": "true", "available": "false"}},
	})
	if !ep.Draining() {
		t.Fatal("drain did not drain")
	}
	run(t, f, []step{
		{name: "drain again", method: "POST", path: "/admin/v1/endpoints/127.0.0.1:8002/drain", status: 200,
			want: map[string]string{"draining": "true"}},
		{name: "undrain escaped", method: "POST", path: "/admin/v1/endpoints/127.0.0.1%3A8002/undrain", status: 200,
			want: map[string]string{"draining": "false", "available": "true"}},
		{name: "unknown", method: "POST", path: "/admin/v1/endpoints/10.0.0.1:1/drain", status: 404,
			want: map[string]string{"error.code": "endpoint_not_found"}},
	})
	if ep.Draining() {
		t.Fatal("undrain did not undrain")
	}
}

func TestSessions(t *testing.T) {
	f := newFixture(t, nil, admin.Config{})
	now := time.Now()
	f.sessions.Touch("default", "s/1", now)
	if err := f.sessions.Pin(context.Background(), "default", "s/1", "127.0.0.1:8001", 12, sessions.PinNew, now); err != nil {
		t.Fatal(err)
	}
	run(t, f, []step{
		{name: "get", method: "GET", path: "/admin/v1/tenants/default/sessions/s%2F1", status: 200,
			want: map[string]string{"key": "s/1", "turns": "1", "endpoint": "127.0.0.1:8001", "prefixBlocks": "12"}},
		{name: "other tenant", method: "GET", path: "/admin/v1/tenants/acme/sessions/s%2F1", status: 404,
			want: map[string]string{"error.code": "session_not_found"}},
		{name: "unpin", method: "POST", path: "/admin/v1/tenants/default/sessions/s%2F1/unpin", status: 200,
			want: map[string]string{"endpoint": "", "turns": "1"}},
	})
	if ep, _ := f.sessions.Pinned("default", "s/1", time.Now()); ep != "" {
		t.Errorf("still pinned to %q", ep)
	}
}

// TestReload is the persistence round trip: a second Service over the same
// store (for Pebble, the database closed and opened again) has the same
// tenants and keys, and publishes the same snapshot.
func TestReload(t *testing.T) {
	for _, tc := range []struct {
		name string
		// open returns a store, and a function that reopens it.
		open func(t *testing.T) (state.Namespace, func() state.Namespace)
	}{
		{name: "memory", open: func(t *testing.T) (state.Namespace, func() state.Namespace) {
			kv := memKV(t)
			return kv, func() state.Namespace { return kv }
		}},
		{name: "pebble", open: func(t *testing.T) (state.Namespace, func() state.Namespace) {
			dir := t.TempDir()
			db, err := state.OpenPebble(dir, state.PebbleOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return db.Namespace("m/admin/"), func() state.Namespace {
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				db2, err := state.OpenPebble(dir, state.PebbleOptions{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db2.Close() })
				return db2.Namespace("m/admin/")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, reopen := tc.open(t)
			testReload(t, kv, reopen)
		})
	}
}

func testReload(t *testing.T, kv state.Namespace, reopen func() state.Namespace) {
	ctx := context.Background()
	f := newFixture(t, kv, admin.Config{})
	var secrets []string
	for _, tt := range []turns.Tenant{
		{Name: "acme", Weight: 2, Quota: turns.Quota{TokensPerMinute: 1000}},
		{Name: "batch", DefaultBand: turns.Background, MaxBand: turns.Standard},
	} {
		if _, err := f.svc.CreateTenant(ctx, tt); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			_, s, err := f.svc.CreateKey(ctx, tt.Name, "k")
			if err != nil {
				t.Fatal(err)
			}
			secrets = append(secrets, s)
		}
	}
	revoked, _ := f.svc.Keys("acme")
	if err := f.svc.RevokeKey(ctx, "acme", revoked[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.SetFlowControl(ctx, turns.FlowControl{HoldAt: 0.7}); err != nil {
		t.Fatal(err)
	}

	g := newFixture(t, reopen(), admin.Config{})
	t.Run("tenants", func(t *testing.T) {
		a, b := f.svc.Tenants(), g.svc.Tenants()
		if !equalJSON(a, b) {
			t.Errorf("before %+v\nafter %+v", a, b)
		}
		if got := g.flow.Tenant("acme").Weight; got != 2 {
			t.Errorf("flow control weight %g after reload", got)
		}
	})
	t.Run("keys", func(t *testing.T) {
		for _, name := range []string{"acme", "batch"} {
			a, _ := f.svc.Keys(name)
			b, _ := g.svc.Keys(name)
			if !equalJSON(a, b) {
				t.Errorf("%s: before %+v\nafter %+v", name, a, b)
			}
		}
	})
	t.Run("snapshot", func(t *testing.T) {
		fo, fm := f.keys.snapshot()
		gopen, gm := g.keys.snapshot()
		if fo != gopen || !maps.Equal(fm, gm) || len(gm) != 3 {
			t.Errorf("before open=%v %v\nafter open=%v %v", fo, fm, gopen, gm)
		}
		want := []string{"acme", "batch", "batch"}
		for i, s := range secrets[1:] {
			if got := g.keys.tenant(s); got != want[i] {
				t.Errorf("key %d authenticates as %q, want %q", i+1, got, want[i])
			}
		}
		if got := g.keys.tenant(secrets[0]); got != "" {
			t.Errorf("revoked key authenticates as %q", got)
		}
	})
	t.Run("flowControl", func(t *testing.T) {
		if got := g.flow.Config().HoldAt; got != 0.7 {
			t.Errorf("holdAt %g after reload, want 0.7", got)
		}
	})
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestConfigTenants(t *testing.T) {
	kv := memKV(t)
	fileKey := auth.HashKey("tp-file-secret")
	cfg := admin.Config{Tenants: []admin.TenantConfig{{
		Tenant: turns.Tenant{Name: "acme", Weight: 4},
		Keys:   []string{fileKey.String(), "env:ACME_KEY"},
	}}}
	f := newFixture(t, kv, cfg)
	for _, s := range []string{"tp-file-secret", "tp-acme-secret"} {
		if got := f.keys.tenant(s); got != "acme" {
			t.Errorf("config key %q authenticates as %q", s, got)
		}
	}
	status, out := f.do(t, "GET", "/admin/v1/tenants/acme/keys", "")
	if status != 200 || len(lookup(out, "data").([]any)) != 2 || lookup(out, "data.0.source") != "config" {
		t.Fatalf("%d %v", status, out)
	}
	cfgKeyID := lookup(out, "data.0.id").(string)
	run(t, f, []step{
		{name: "get", method: "GET", path: "/admin/v1/tenants/acme", status: 200,
			want: map[string]string{"source": "config", "weight": "4"}},
		{name: "update refused", method: "PATCH", path: "/admin/v1/tenants/acme", body: `{"weight":1}`, status: 409,
			want: map[string]string{"error.code": "defined_in_config"}},
		{name: "delete refused", method: "DELETE", path: "/admin/v1/tenants/acme", status: 409},
		{name: "revoke config key refused", method: "DELETE", path: "/admin/v1/tenants/acme/keys/" + cfgKeyID, status: 409},
		{name: "API key for config tenant", method: "POST", path: "/admin/v1/tenants/acme/keys", status: 201},
	})

	t.Run("orphaned keys are dropped", func(t *testing.T) {
		g := newFixture(t, kv, admin.Config{}) // acme gone from the file
		if open, m := g.keys.snapshot(); !open || len(m) != 0 {
			t.Errorf("open=%v keys=%v", open, m)
		}
		if _, err := g.svc.CreateTenant(context.Background(), turns.Tenant{Name: "acme"}); err != nil {
			t.Fatal(err)
		}
		if ks, _ := g.svc.Keys("acme"); len(ks) != 0 {
			t.Errorf("a new acme inherited %v", ks)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	h := auth.HashKey("x").String()
	for _, tc := range []struct {
		name string
		cfg  admin.Config
		want []string // substrings of the error; none means valid
	}{
		{name: "empty", cfg: admin.Config{}},
		{name: "full", cfg: admin.Config{AdminToken: h, Tenants: []admin.TenantConfig{{Tenant: turns.Tenant{Name: "a"}, Keys: []string{h, "env:K"}}}}},
		{name: "plain admin token", cfg: admin.Config{AdminToken: "secret"}},
		{name: "bad admin hash", cfg: admin.Config{AdminToken: "sha256:abc"}, want: []string{"adminToken"}},
		{name: "every problem at once", cfg: admin.Config{Tenants: []admin.TenantConfig{
			{Tenant: turns.Tenant{Name: "a b"}, Keys: []string{"tp-plaintext", "env:", "sha256:zz"}},
			{Tenant: turns.Tenant{Name: "c", Weight: -1}},
			{Tenant: turns.Tenant{Name: "c"}},
		}}, want: []string{"tenants[0].name", "tenants[0].keys[0]", "tenants[0].keys[1]", "tenants[0].keys[2]", "tenants[1].weight", "duplicate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.EnsureDefaults()
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("valid; want %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\ndoes not mention %q", err, w)
				}
			}
		})
	}
}

func TestNewFailsOnMissingEnvKey(t *testing.T) {
	_, err := admin.New(context.Background(), admin.Deps{
		Store:  memKV(t),
		Keys:   &keyring{},
		Config: admin.Config{Tenants: []admin.TenantConfig{{Tenant: turns.Tenant{Name: "a"}, Keys: []string{"env:NOPE"}}}},
		Getenv: func(string) string { return "" },
	})
	if err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Fatalf("err = %v", err)
	}
}

func TestWithoutFlowOrSessions(t *testing.T) {
	svc, err := admin.New(context.Background(), admin.Deps{Store: memKV(t), Keys: &keyring{}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEcho()
	svc.Register(e.Group("/admin/v1"))
	f := &fixture{e: e}
	run(t, f, []step{
		{name: "flowcontrol", method: "GET", path: "/admin/v1/flowcontrol", status: 501, want: map[string]string{"error.code": "not_enabled"}},
		{name: "session", method: "GET", path: "/admin/v1/tenants/a/sessions/s", status: 501},
		{name: "pools", method: "GET", path: "/admin/v1/pools", status: 200, want: map[string]string{"data": "[]"}},
		{name: "endpoint", method: "POST", path: "/admin/v1/endpoints/x/drain", status: 404},
	})
}

// newEcho is an Echo whose error handler writes an *apierror.Error as the
// gateway's does: the status and the OpenAI-shaped body.
func newEcho() *echo.Echo {
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var ae *apierror.Error
		if !errors.As(err, &ae) {
			e.DefaultHTTPErrorHandler(err, c)
			return
		}
		ae.Write(c.Response())
	}
	return e
}

// TestErrorClasses: each class the Service returns is its sentinel for
// errors.Is and the status, type, code and param its handler answers with.
func TestErrorClasses(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil, admin.Config{Tenants: []admin.TenantConfig{{Tenant: turns.Tenant{Name: "file"}}}})
	bare, err := admin.New(ctx, admin.Deps{Store: memKV(t), Keys: &keyring{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.CreateTenant(ctx, turns.Tenant{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		err   error
		class error
		want  string // status type code param
	}{
		{"exists", second(f.svc.CreateTenant(ctx, turns.Tenant{Name: "acme"})), admin.ErrExists, "409 invalid_request_error tenant_exists name"},
		{"not found", second(f.svc.Tenant("nobody")), admin.ErrNotFound, "404 invalid_request_error tenant_not_found tenant"},
		{"invalid", second(f.svc.CreateTenant(ctx, turns.Tenant{Name: "b", Weight: -1})), admin.ErrInvalid, "400 invalid_request_error invalid_value weight"},
		{"invalid flow control", f.svc.SetFlowControl(ctx, turns.FlowControl{HoldAt: 2}), admin.ErrInvalid, "400 invalid_request_error invalid_value holdAt"},
		{"configured", f.svc.DeleteTenant(ctx, "file"), admin.ErrConfigured, "409 invalid_request_error defined_in_config tenant"},
		{"unavailable", bare.SetFlowControl(ctx, turns.FlowControl{}), admin.ErrUnavailable, "501 server_error not_enabled "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae *apierror.Error
			if !errors.As(tc.err, &ae) || !errors.Is(tc.err, tc.class) {
				t.Fatalf("%v: not an apierror.Error of class %v", tc.err, tc.class)
			}
			if got := fmt.Sprintf("%d %s %s %s", ae.Status, ae.Type, ae.Code, ae.Param); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// second is the error of a call that also returns a value.
func second[T any](_ T, err error) error { return err }

// TestRefreshSharedStore: two services on one store, as two gateways on
// one Redis: what one changes, the other applies at its next Refresh
// (tenants, keys, revocation, flowControl saved and reset), and a Refresh
// with nothing changed does nothing.
func TestRefreshSharedStore(t *testing.T) {
	ctx := context.Background()
	kv := memKV(t)
	a, b := newFixture(t, kv, admin.Config{}), newFixture(t, kv, admin.Config{})
	refresh := func(want bool) {
		t.Helper()
		got, err := b.svc.Refresh(ctx)
		if err != nil || got != want {
			t.Fatalf("Refresh = %v, %v; want %v", got, err, want)
		}
	}
	refresh(false)
	if _, err := a.svc.CreateTenant(ctx, turns.Tenant{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	key, secret, err := a.svc.CreateKey(ctx, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.keys.tenant(secret); got != "" {
		t.Fatalf("b knew the key before Refresh: %q", got)
	}
	refresh(true)
	if got := b.keys.tenant(secret); got != "acme" {
		t.Errorf("after Refresh the key authenticates as %q, want acme", got)
	}
	if _, err := b.svc.Tenant("acme"); err != nil {
		t.Errorf("b's tenants after Refresh: %v", err)
	}
	refresh(false)

	if err := a.svc.SetFlowControl(ctx, turns.FlowControl{MaxInFlightPerEndpoint: 9}); err != nil {
		t.Fatal(err)
	}
	refresh(true)
	if got := b.flow.Config().MaxInFlightPerEndpoint; got != 9 {
		t.Errorf("b's flow control after Refresh: maxInFlightPerEndpoint %d, want 9", got)
	}
	if _, over, _ := b.svc.FlowControl(); !over {
		t.Error("b does not mark the flowControl as saved through the API")
	}
	if err := a.svc.ResetFlowControl(ctx); err != nil {
		t.Fatal(err)
	}
	refresh(true)
	if got, over, _ := b.svc.FlowControl(); over || got.MaxInFlightPerEndpoint == 9 {
		t.Errorf("b after the reset: override %v, maxInFlightPerEndpoint %d", over, got.MaxInFlightPerEndpoint)
	}

	if err := a.svc.RevokeKey(ctx, "acme", key.ID); err != nil {
		t.Fatal(err)
	}
	refresh(true)
	if got := b.keys.tenant(secret); got != "" {
		t.Errorf("a revoked key still authenticates on b as %q", got)
	}
	// And the other way: b's change reaches a.
	if err := b.svc.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.svc.Refresh(ctx); !ok || err != nil {
		t.Fatalf("a's Refresh: %v %v", ok, err)
	}
	if _, err := a.svc.Tenant("acme"); err == nil {
		t.Error("a still has the tenant b deleted")
	}
}

// TestConfigRefusesDefaultTenant: the config file cannot name a tenant
// "default" either: it would read what was stored while the gateway ran
// open (issue 32, item 5).
func TestConfigRefusesDefaultTenant(t *testing.T) {
	cfg := admin.Config{Tenants: []admin.TenantConfig{{Tenant: turns.Tenant{Name: auth.DefaultTenant}}}}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("Validate() = %v, want the name refused as reserved", err)
	}
}
