package state_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// TestRedisScanPages: a scan longer than a page reads page after page, in
// order both ways, within the range, and stops where fn does.
func TestRedisScanPages(t *testing.T) {
	srv := redistest.Start(t)
	db := openRedis(t, srv.URL(), state.RedisOptions{ScanPage: 3})
	ns := db.Namespace("t/")
	var want []string
	for i := range 10 {
		k := fmt.Sprintf("k%02d", i)
		put(t, ns, k, "v")
		want = append(want, k+"=v")
	}
	put(t, ns, "j", "before", "l", "after")
	if got := scan(t, ns, state.Prefix([]byte("k"))); !slices.Equal(got, want) {
		t.Errorf("forward: %v, want %v", got, want)
	}
	rev := slices.Clone(want)
	slices.Reverse(rev)
	if got := scan(t, ns, state.Range{Start: []byte("k"), End: []byte("l"), Reverse: true}); !slices.Equal(got, rev) {
		t.Errorf("reverse: %v, want %v", got, rev)
	}
	// Exactly a page's multiple: the last, empty page ends it.
	if got := scan(t, ns, state.Range{Start: []byte("k01"), End: []byte("k07")}); !slices.Equal(got, want[1:7]) {
		t.Errorf("six keys, pages of three: %v", got)
	}
	n := 0
	err := ns.Scan(context.Background(), state.Range{}, func(_, _ []byte) error {
		if n++; n == 5 {
			return errStop
		}
		return nil
	})
	if err != errStop || n != 5 {
		t.Errorf("stopped scan: %v after %d keys", err, n)
	}
}

// TestRedisDeletePrefixMany: a DeletePrefix larger than the script's step
// takes every key of the prefix, and nothing else.
func TestRedisDeletePrefixMany(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	db := openRedis(t, srv.URL(), state.RedisOptions{})
	ns := db.Namespace("t/")
	var b state.Batch
	for i := range 1300 {
		b.Put(fmt.Appendf(nil, "p/%04d", i), []byte("v"))
	}
	b.Put([]byte("q"), []byte("kept"))
	if err := ns.Apply(ctx, &b); err != nil {
		t.Fatal(err)
	}
	var del state.Batch
	del.DeletePrefix([]byte("p/"))
	if err := ns.Apply(ctx, &del); err != nil {
		t.Fatal(err)
	}
	if got := scan(t, ns, state.Range{}); !slices.Equal(got, []string{"q=kept"}) {
		t.Errorf("after DeletePrefix: %d keys, %.3v", len(got), got)
	}
	// The index went with the strings: only q's string and the index
	// remain under the namespace's tag.
	keys, err := rawClient(t, srv.URL()).Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{"turnpike:{t/}i", "turnpike:{t/}vq"}; !slices.Equal(keys, want) {
		t.Errorf("Redis keys %q, want %q", keys, want)
	}
}

// TestRedisLayout: the keys a namespace writes share one hash tag, the
// namespace's prefix after the key prefix, so a cluster keeps them in one
// slot; the index is a sorted set of the namespace's keys, all scores 0.
func TestRedisLayout(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	db := openRedis(t, srv.URL(), state.RedisOptions{KeyPrefix: "gw:"})
	put(t, db.Namespace("rs/"), "r/resp_1", "record", "h/c", "head")
	put(t, db.Namespace("m/admin/"), "tenants/acme", "t")
	rc := rawClient(t, srv.URL())
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{"gw:{m/admin/}i", "gw:{m/admin/}vtenants/acme", "gw:{rs/}i", "gw:{rs/}vh/c", "gw:{rs/}vr/resp_1"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q", keys, want)
	}
	if v, err := rc.Get(ctx, "gw:{rs/}vr/resp_1").Result(); err != nil || v != "record" {
		t.Errorf("string: %q %v", v, err)
	}
	z, err := rc.ZRangeWithScores(ctx, "gw:{rs/}i", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(z) != 2 || z[0].Member != "h/c" || z[1].Member != "r/resp_1" || z[0].Score != 0 || z[1].Score != 0 {
		t.Errorf("index %v", z)
	}
}

// TestRedisSyncedSurvivesServerKill: under appendfsync always (the
// helper's setting), what a synced write acknowledged is in the AOF: a
// kill -9 of redis-server and a restart on the same files lose none of it.
func TestRedisSyncedSurvivesServerKill(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	db := openRedis(t, srv.URL(), state.RedisOptions{})
	ns := db.Namespace("rs/")
	var want []string
	for i := range 50 {
		b := state.Batch{Sync: true}
		k := fmt.Sprintf("r/%02d", i)
		b.Put([]byte(k), []byte("v"))
		b.Put([]byte("i/"+k), []byte("item"))
		if err := ns.Apply(ctx, &b); err != nil {
			t.Fatal(err)
		}
		want = append(want, k+"=v")
	}
	srv.Kill()
	if _, err := ns.Get(ctx, []byte("r/00")); err == nil {
		t.Fatal("a Get with the server killed succeeded")
	}
	srv.Restart()
	// The client reconnects by itself.
	if got := scan(t, ns, state.Prefix([]byte("r/"))); !slices.Equal(got, want) {
		t.Errorf("after kill -9 and restart: %d of %d, %.3v", len(got), len(want), got)
	}
	if got := len(scan(t, ns, state.Prefix([]byte("i/")))); got != len(want) {
		t.Errorf("after kill -9 and restart: %d items of %d", got, len(want))
	}
}

// TestRedisReplicas: with Replicas set, a synced write returns once a
// replica has it (WAIT), and fails, naming the count, when none does in
// time; an unsynced one does not wait.
func TestRedisReplicas(t *testing.T) {
	ctx := context.Background()
	// No delay before the full sync a new replica starts with.
	primary := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	host, port, _ := strings.Cut(primary.Addr(), ":")

	t.Run("no replica", func(t *testing.T) {
		db := openRedis(t, primary.URL(), state.RedisOptions{KeyPrefix: "none:", Replicas: 1, ReplicaTimeout: 50 * time.Millisecond})
		ns := db.Namespace("t/")
		err := ns.Put(ctx, []byte("k"), []byte("v"))
		if err == nil || !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas") {
			t.Fatalf("synced Put without a replica: %v", err)
		}
		b := state.Batch{}
		b.Put([]byte("u"), []byte("v"))
		if err := ns.Apply(ctx, &b); err != nil {
			t.Errorf("unsynced batch: %v", err)
		}
	})
	t.Run("one replica", func(t *testing.T) {
		replica := redistest.Start(t, "--replicaof", host, port)
		db := openRedis(t, primary.URL(), state.RedisOptions{KeyPrefix: "one:", Replicas: 1, ReplicaTimeout: 10 * time.Second})
		ns := db.Namespace("t/")
		for i := range 5 {
			if err := ns.Put(ctx, fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
				t.Fatalf("synced Put with a replica: %v", err)
			}
		}
		// What WAIT counted is on the replica already, index and all.
		rc := rawClient(t, replica.URL())
		if n, err := rc.ZCard(ctx, "one:{t/}i").Result(); err != nil || n != 5 {
			t.Errorf("replica's index: %d keys, %v", n, err)
		}
	})
}

// TestRedisURL: the deployment mode a URL selects, and the errors a bad
// one gets, naming the URL without its password.
func TestRedisURL(t *testing.T) {
	for _, c := range []struct {
		url  string
		want string // the client's type, or a substring of the error
	}{
		{"redis://127.0.0.1:6379/0", "*redis.Client"},
		{"rediss://user:pw@redis.example:6380/2", "*redis.Client"},
		{"redis://h1:7000?addr=h2:7000&addr=h3:7000", "*redis.ClusterClient"},
		{"redis://h1:7000?mode=cluster", "*redis.ClusterClient"},
		{"redis://s1:26379?master_name=mymaster&addr=s2:26379", "*redis.Client"},
		{"redis://127.0.0.1:6379?mode=standalone", "*redis.Client"},
		{"http://127.0.0.1:6379", `scheme "http", want redis or rediss`},
		{"redis://h:1?mode=ring", `mode "ring"`},
		{"redis://h:1?mode=sentinel", "sentinel mode needs master_name"},
		{"redis://u:secret@h:1/x", "invalid database number"},
		{"redis://u:secret@h:1?no_such=1", "no_such"},
		{"::", "not a URL"},
	} {
		t.Run(c.url, func(t *testing.T) {
			client, err := state.NewRedisClient(c.url)
			got := fmt.Sprintf("%T", client)
			if err != nil {
				got = err.Error()
				if strings.Contains(got, "secret") {
					t.Errorf("the error shows the password: %s", got)
				}
			} else {
				client.Close()
			}
			if !strings.Contains(got, c.want) {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

func TestRedisOptionsValidate(t *testing.T) {
	err := (&state.RedisOptions{KeyPrefix: "a{b}", Replicas: -1, ReplicaTimeout: -1, ScanPage: -1}).Validate()
	for _, want := range []string{"hash tags", "replicas", "replica timeout", "scan page"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to say %q", err, want)
		}
	}
	if _, err := state.OpenRedis(context.Background(), "redis://127.0.0.1:1", state.RedisOptions{KeyPrefix: "{"}); err == nil {
		t.Error("OpenRedis with a bad key prefix succeeded")
	}
}

// FuzzRedisURL: any config string makes a client or an error, never a
// panic.
func FuzzRedisURL(f *testing.F) {
	for _, s := range []string{"redis://h:1/0", "rediss://u:p@h/1?addr=x:1", "redis://h?master_name=m", "redis://h?mode=cluster&dial_timeout=3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := state.NewRedisClient(s); err == nil {
			c.Close()
		}
	})
}

func rawClient(t testing.TB, url string) *redis.Client {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisMetrics: a Redis store exports its pool and its failed
// operations; Pebble and memory export nothing.
func TestRedisMetrics(t *testing.T) {
	ctx := context.Background()
	if c := state.NewMemory().Collector(); c != nil {
		t.Errorf("memory exports %T", c)
	}
	srv := redistest.Start(t)
	db := openRedis(t, srv.URL(), state.RedisOptions{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(db.Collector())
	ns := db.Namespace("t/")
	put(t, ns, "a", "1")
	srv.Kill()
	if _, err := ns.Get(ctx, []byte("a")); err == nil {
		t.Fatal("Get with the server killed succeeded")
	}
	got := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if got["turnpike_state_redis_errors_total{get}"] != 1 || got["turnpike_state_redis_errors_total{apply}"] != 0 {
		t.Errorf("errors: %v", got)
	}
	if v, ok := got["turnpike_state_redis_up"]; !ok || v != 0 {
		t.Errorf("up with the server killed: %v, %v", v, ok)
	}
	if got["turnpike_state_redis_pool_misses_total"] < 1 {
		t.Errorf("no connection dialled: %v", got)
	}
	for _, name := range []string{"turnpike_state_redis_pool_hits_total", "turnpike_state_redis_pool_connections{idle}", "turnpike_state_redis_pool_timeouts_total"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s in %v", name, got)
		}
	}
}

func TestRedisBroadcast(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	open := func() *state.DB {
		db, err := state.OpenRedis(ctx, srv.URL(), state.RedisOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	a, b := open(), open()
	if state.NewMemory().Broadcast("x") != nil {
		t.Fatal("memory store has a broadcast channel")
	}
	got := make(chan string, 4)
	subCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.Broadcast("routes").Subscribe(subCtx, func(msg []byte) { got <- string(msg) })
	}()
	// Publish until the subscription hears it: it may not be set up yet.
	pub := a.Broadcast("routes")
	other := a.Broadcast("other")
	var first string
	for first == "" {
		if err := other.Publish(ctx, []byte("not for routes")); err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(ctx, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case first = <-got:
		case <-time.After(20 * time.Millisecond):
		}
	}
	if first != "hello" {
		t.Fatalf("heard %q", first)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Subscribe after cancel: %v", err)
	}
	for len(got) > 0 {
		if m := <-got; m != "hello" {
			t.Fatalf("heard %q on routes", m)
		}
	}
}
