package admin_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/state"
)

// lendPools is a fleet with a pool of its own and a lendable one.
var lendPools = []pools.PoolConfig{
	{Name: "gpu", ServedModels: []string{"m"}, Endpoints: []pools.EndpointConfig{{URL: "http://127.0.0.1:8001"}}},
	{Name: "trainer", Lendable: true, ServedModels: []string{"m"}, Endpoints: []pools.EndpointConfig{{URL: "http://127.0.0.1:8101"}, {URL: "http://127.0.0.1:8102"}}},
}

func newLendFixture(t *testing.T, kv state.Namespace, reg prometheus.Registerer) *fixture {
	t.Helper()
	return newFixtureWith(t, kv, admin.Config{}, lendPools, reg, nil)
}

func TestLendAndReclaim(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newLendFixture(t, nil, reg)
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	run(t, f, []step{
		{name: "lendable and idle", method: http.MethodGet, path: "/admin/v1/pools/trainer", status: 200,
			want: map[string]string{"lendable": "true", "lending.state": "idle", "endpoints.0.available": "false"}},
		{name: "a pool of its own shows no lending", method: http.MethodGet, path: "/admin/v1/pools/gpu", status: 200,
			want: map[string]string{"lendable": "false", "lending": "null", "endpoints.0.available": "true"}},
		{name: "reclaim before any lend", method: http.MethodPost, path: "/admin/v1/pools/trainer/reclaim", status: 409,
			want: map[string]string{"error.code": "pool_not_lent", "error.param": "name"}},
		{name: "lend until", method: http.MethodPost, path: "/admin/v1/pools/trainer/lend", body: `{"until":"` + until + `","reclaimDeadline":"5s"}`, status: 200,
			want: map[string]string{"lending.state": "lent", "lending.until": until, "lending.reclaimDeadlineSeconds": "5", "endpoints.0.available": "true", "endpoints.1.available": "true"}},
		{name: "listed lent", method: http.MethodGet, path: "/admin/v1/pools", status: 200,
			want: map[string]string{"data.1.name": "trainer", "data.1.lending.state": "lent", "data.0.lending": "null"}},
		{name: "lend again for a duration", method: http.MethodPost, path: "/admin/v1/pools/trainer/lend", body: `{"duration":"10m"}`, status: 200,
			want: map[string]string{"lending.state": "lent", "lending.reclaimDeadlineSeconds": "30"}},
		{name: "reclaim with a deadline", method: http.MethodPost, path: "/admin/v1/pools/trainer/reclaim", body: `{"deadline":"20s"}`, status: 200,
			want: map[string]string{"lending.state": "reclaiming", "endpoints.0.available": "false", "lending.reclaims": "1"}},
		{name: "a later deadline does not push it back", method: http.MethodPost, path: "/admin/v1/pools/trainer/reclaim", body: `{"deadline":"1h"}`, status: 200,
			want: map[string]string{"lending.state": "reclaiming", "lending.reclaims": "1"}},
		{name: "cut now", method: http.MethodPost, path: "/admin/v1/pools/trainer/reclaim", body: `{"deadline":"0s"}`, status: 200,
			want: map[string]string{"lending.state": "idle", "lending.inFlight": "0"}},
		{name: "reclaimed already", method: http.MethodPost, path: "/admin/v1/pools/trainer/reclaim", status: 409,
			want: map[string]string{"error.code": "pool_not_lent"}},
	})
	status, out := f.do(t, http.MethodGet, "/admin/v1/pools/trainer", "")
	if status != 200 {
		t.Fatal(out)
	}
	reclaimedAt, _ := time.Parse(time.RFC3339Nano, jsonString(lookup(out, "lending.reclaimedAt")))
	deadline, _ := time.Parse(time.RFC3339Nano, jsonString(lookup(out, "lending.deadline")))
	if d := deadline.Sub(reclaimedAt); d < 0 || d > 20*time.Second {
		t.Errorf("deadline %v after the reclaim, want within the first reclaim's 20s", d)
	}
	want := `
# HELP turnpike_pool_lent 1 while the lendable pool takes lent background work, 0 otherwise.
# TYPE turnpike_pool_lent gauge
turnpike_pool_lent{pool="trainer"} 0
# HELP turnpike_pool_reclaims_total Leases of the lendable pool that ended: reclaimed, or their window over.
# TYPE turnpike_pool_reclaims_total counter
turnpike_pool_reclaims_total{pool="trainer"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "turnpike_pool_lent", "turnpike_pool_reclaims_total"); err != nil {
		t.Error(err)
	}
}

func TestLendRefused(t *testing.T) {
	f := newLendFixture(t, nil, nil)
	past := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	lend := func(name, body, param, code string) step {
		return step{name: name, method: http.MethodPost, path: "/admin/v1/pools/trainer/lend", body: body, status: 400,
			want: map[string]string{"error.param": param, "error.code": code, "error.type": "invalid_request_error"}}
	}
	run(t, f, []step{
		{name: "no such pool", method: http.MethodPost, path: "/admin/v1/pools/tpu/lend", body: `{"duration":"1m"}`, status: 404,
			want: map[string]string{"error.code": "pool_not_found"}},
		{name: "not lendable", method: http.MethodPost, path: "/admin/v1/pools/gpu/lend", body: `{"duration":"1m"}`, status: 409,
			want: map[string]string{"error.code": "pool_not_lendable"}},
		{name: "reclaim a pool that is not lendable", method: http.MethodPost, path: "/admin/v1/pools/gpu/reclaim", status: 409,
			want: map[string]string{"error.code": "pool_not_lendable"}},
		lend("empty", ``, "null", "invalid_value"),
		lend("no window", `{"reclaimDeadline":"5s"}`, "until", "invalid_value"),
		lend("both", `{"until":"2030-01-01T00:00:00Z","duration":"1m"}`, "until", "invalid_value"),
		lend("past", `{"until":"`+past+`"}`, "until", "invalid_value"),
		lend("not a time", `{"until":"tomorrow"}`, "until", "invalid_value"),
		lend("not a duration", `{"duration":"ten minutes"}`, "duration", "invalid_value"),
		lend("zero", `{"duration":"0s"}`, "duration", "invalid_value"),
		lend("too long", `{"duration":"169h"}`, "duration", "invalid_value"),
		lend("negative deadline", `{"duration":"1m","reclaimDeadline":"-1s"}`, "reclaimDeadline", "invalid_value"),
		lend("unknown field", `{"duration":"1m","window":"x"}`, "window", "invalid_value"),
		lend("not JSON", `{`, "null", "invalid_value"),
		{name: "still idle", method: http.MethodGet, path: "/admin/v1/pools/trainer", status: 200,
			want: map[string]string{"lending.state": "idle"}},
	})
}

// TestLendSharedStore: a lend and a reclaim made on one gateway reach
// another sharing its store at its next Refresh, and a restarted gateway
// applies the lease still in force.
func TestLendSharedStore(t *testing.T) {
	ctx := context.Background()
	kv := memKV(t)
	a, b := newLendFixture(t, kv, nil), newLendFixture(t, kv, nil)
	trainer := func(f *fixture) *pools.Pool { return f.reg.Pools[1] }
	if err := a.svc.Lend(ctx, trainer(a), pools.Lease{Until: time.Now().Add(time.Hour), Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if trainer(b).Lent() {
		t.Fatal("b lent the pool before Refresh")
	}
	if ok, err := b.svc.Refresh(ctx); !ok || err != nil {
		t.Fatalf("Refresh = %v, %v", ok, err)
	}
	if !trainer(b).Lent() || !trainer(b).Endpoints()[0].Available() {
		t.Fatal("b does not take lent work after Refresh")
	}
	restarted := newLendFixture(t, kv, nil)
	if !trainer(restarted).Lent() {
		t.Fatal("a restarted gateway forgot the lease in force")
	}
	if err := b.svc.Reclaim(ctx, trainer(b), 0, true); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.svc.Refresh(ctx); !ok || err != nil {
		t.Fatalf("a's Refresh = %v, %v", ok, err)
	}
	if trainer(a).Lent() {
		t.Error("a still lends the pool b reclaimed")
	}
}

func TestParseLend(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l, err := admin.ParseLend([]byte(`{"duration":"90s","reclaimDeadline":"2s"}`), now)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Until.Equal(now.Add(90*time.Second)) || l.Grace != 2*time.Second || !l.Admits(now) || l.Admits(now.Add(90*time.Second)) {
		t.Errorf("lease %+v", l)
	}
	if d := l.Deadline(); !d.Equal(now.Add(92 * time.Second)) {
		t.Errorf("deadline %v, want the window's end plus its grace", d)
	}
	d, ok, err := admin.ParseReclaim(nil)
	if err != nil || ok || d != 0 {
		t.Errorf("empty reclaim: %v %v %v", d, ok, err)
	}
	d, ok, err = admin.ParseReclaim([]byte(`{"deadline":"3s"}`))
	if err != nil || !ok || d != 3*time.Second {
		t.Errorf("reclaim of 3s: %v %v %v", d, ok, err)
	}
}

// TestLendSchedule: a pool lent on its schedule is lent at each window's
// start until the window's end; a reclaim through the API ends that
// window's lending, the next window lends again, and a longer lease named
// through the API stands. A second gateway sharing the store writes the
// same lease.
func TestLendSchedule(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC) // a Monday
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	set := func(s string) {
		t.Helper()
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		clock = tm
		mu.Unlock()
	}
	pcs := append([]pools.PoolConfig(nil), lendPools...)
	pcs[1].LendSchedule = &pools.LendSchedule{ReclaimDeadline: "10s", Windows: []pools.LendWindow{
		{Days: []string{"mon", "tue", "wed", "thu", "fri"}, From: "22:00", To: "06:00"},
	}}
	kv := memKV(t)
	a := newFixtureWith(t, kv, admin.Config{}, pcs, nil, now)
	b := newFixtureWith(t, kv, admin.Config{}, pcs, nil, now)
	trainer := func(f *fixture) *pools.Pool { return f.reg.Pools[1] }
	apply := func(f *fixture) {
		t.Helper()
		if err := f.svc.ApplyLendSchedules(ctx); err != nil {
			t.Fatal(err)
		}
	}
	until := func(f *fixture) string { return trainer(f).Lease().Until.Format(time.RFC3339) }
	if !a.svc.HasLendSchedules() {
		t.Fatal("HasLendSchedules is false with a scheduled pool")
	}

	apply(a)
	if trainer(a).Lent() {
		t.Fatal("lent before the window opens")
	}
	set("2026-11-30T22:00:30Z")
	apply(a)
	if !trainer(a).Lent() || until(a) != "2026-12-01T06:00:00Z" || trainer(a).Lease().Grace != 10*time.Second {
		t.Fatalf("in the window: lent %v until %s grace %v; want lent until 2026-12-01T06:00:00Z, grace 10s",
			trainer(a).Lent(), until(a), trainer(a).Lease().Grace)
	}
	// Gateway b reads the lease, and its own schedule changes nothing.
	if _, err := b.svc.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	apply(b)
	if !trainer(b).Lent() || until(b) != "2026-12-01T06:00:00Z" {
		t.Fatalf("gateway b: lent %v until %s", trainer(b).Lent(), until(b))
	}

	// Reclaimed through the API: the window is not opened again, even by
	// a gateway that has not read the store since (a stale copy here).
	stale := newFixtureWith(t, kv, admin.Config{}, pcs, nil, now)
	if err := b.svc.Reclaim(ctx, trainer(b), 0, true); err != nil {
		t.Fatal(err)
	}
	set("2026-12-01T01:00:00Z")
	trainer(stale).SetLease(pools.Lease{}, now())
	apply(stale)
	if trainer(stale).Lent() {
		t.Fatal("a gateway that had not read the reclaim lent the window again")
	}
	if _, err := a.svc.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	apply(a)
	apply(b)
	if trainer(a).Lent() || trainer(b).Lent() {
		t.Fatal("a reclaimed window was lent again")
	}

	// Tuesday's window lends again; a longer lease through the API stands.
	set("2026-12-01T22:10:00Z")
	apply(a)
	if !trainer(a).Lent() || until(a) != "2026-12-02T06:00:00Z" {
		t.Fatalf("the next window: lent %v until %s", trainer(a).Lent(), until(a))
	}
	if err := a.svc.Lend(ctx, trainer(a), pools.Lease{Until: time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC), Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	apply(a)
	if until(a) != "2026-12-02T08:00:00Z" {
		t.Fatalf("the API's longer lease became %s", until(a))
	}
}
