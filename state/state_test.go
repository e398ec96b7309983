package state_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// implementations are the DBs every conformance case runs on. setup runs
// once per implementation (it starts a redis-server for Redis) and
// returns how to open a fresh, empty DB for each case.
var implementations = []struct {
	name  string
	setup func(t testing.TB) func(t testing.TB) *state.DB
}{
	{name: "memory", setup: func(testing.TB) func(testing.TB) *state.DB {
		return func(t testing.TB) *state.DB {
			db := state.NewMemory()
			t.Cleanup(func() { db.Close() })
			return db
		}
	}},
	{name: "pebble", setup: func(testing.TB) func(testing.TB) *state.DB {
		return func(t testing.TB) *state.DB { return openPebble(t, t.TempDir()) }
	}},
	{name: "redis", setup: func(t testing.TB) func(testing.TB) *state.DB {
		srv := redistest.Start(t)
		n := 0
		return func(t testing.TB) *state.DB {
			// A key prefix of its own keeps each case's keys apart on
			// the one server.
			n++
			return openRedis(t, srv.URL(), state.RedisOptions{KeyPrefix: fmt.Sprintf("case%d:", n)})
		}
	}},
	// A one-node cluster: a batch touching two hash slots would fail
	// with CROSSSLOT, so this proves each namespace keeps to one.
	{name: "redis-cluster", setup: func(t testing.TB) func(testing.TB) *state.DB {
		srv := redistest.StartCluster(t)
		n := 0
		return func(t testing.TB) *state.DB {
			n++
			return openRedis(t, srv.URL()+"?mode=cluster", state.RedisOptions{KeyPrefix: fmt.Sprintf("case%d:", n)})
		}
	}},
}

func openRedis(t testing.TB, url string, opts state.RedisOptions) *state.DB {
	t.Helper()
	db, err := state.OpenRedis(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openPebble(t testing.TB, dir string) *state.DB {
	t.Helper()
	db, err := state.OpenPebble(dir, state.PebbleOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestConformance runs every case on every implementation: they answer
// alike, so a test over memory speaks for Pebble and Redis.
func TestConformance(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			open := impl.setup(t)
			for _, tc := range conformance {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, open(t)) })
			}
		})
	}
}

var conformance = []struct {
	name string
	run  func(t *testing.T, db *state.DB)
}{
	{"get missing", testGetMissing},
	{"put get overwrite", testPutGet},
	{"delete", testDelete},
	{"scan order", testScanOrder},
	{"scan stops", testScanStops},
	{"scan is a snapshot", testScanSnapshot},
	{"namespaces", testNamespaces},
	{"owners' namespaces", testOwnersNamespaces},
	{"prefix scan", testPrefixScan},
	{"batch order", testBatchOrder},
	{"batch atomic", testBatchAtomic},
	{"empty batch", testEmptyBatch},
	{"put value", testPutValue},
	{"cancelled", testCancelled},
	{"closed", testClosed},
	{"close under load", testCloseUnderLoad},
	{"lease", testLease},
	{"token buckets", testDraw},
	{"lease race", testLeaseRace},
}

func get(t *testing.T, ns state.Namespace, key string) string {
	t.Helper()
	v, err := ns.Get(context.Background(), []byte(key))
	if errors.Is(err, state.ErrNotFound) {
		return "<missing>"
	}
	if err != nil {
		t.Fatalf("Get %q: %v", key, err)
	}
	return string(v)
}

func put(t *testing.T, ns state.Namespace, kvs ...string) {
	t.Helper()
	for i := 0; i < len(kvs); i += 2 {
		if err := ns.Put(context.Background(), []byte(kvs[i]), []byte(kvs[i+1])); err != nil {
			t.Fatal(err)
		}
	}
}

// scan is the namespace's keys in r as "key=value", in scan order.
func scan(t *testing.T, ns state.Namespace, r state.Range) []string {
	t.Helper()
	var out []string
	err := ns.Scan(context.Background(), r, func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func testGetMissing(t *testing.T, db *state.DB) {
	ns := db.Namespace("t/")
	if _, err := ns.Get(context.Background(), []byte("nope")); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Get missing: %v, want ErrNotFound", err)
	}
}

func testPutGet(t *testing.T, db *state.DB) {
	ctx := context.Background()
	ns := db.Namespace("t/")
	value := []byte("one")
	if err := ns.Put(ctx, []byte("k"), value); err != nil {
		t.Fatal(err)
	}
	copy(value, "XXX") // the store kept its own copy
	if got := get(t, ns, "k"); got != "one" {
		t.Errorf("Get = %q, want one", got)
	}
	v, _ := ns.Get(ctx, []byte("k"))
	copy(v, "YYY") // and Get hands out a copy
	if got := get(t, ns, "k"); got != "one" {
		t.Errorf("Get after changing a returned value = %q, want one", got)
	}
	put(t, ns, "k", "two")
	if got := get(t, ns, "k"); got != "two" {
		t.Errorf("Get after overwrite = %q, want two", got)
	}
	put(t, ns, "empty", "")
	if v, err := ns.Get(ctx, []byte("empty")); err != nil || len(v) != 0 {
		t.Errorf("Get empty value = %q, %v", v, err)
	}
}

func testDelete(t *testing.T, db *state.DB) {
	ctx := context.Background()
	ns := db.Namespace("t/")
	put(t, ns, "a", "1", "b", "2")
	if err := ns.Delete(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := ns.Delete(ctx, []byte("never")); err != nil {
		t.Errorf("Delete missing: %v, want nil", err)
	}
	if got := get(t, ns, "a"); got != "<missing>" {
		t.Errorf("after Delete: %q", got)
	}
	if got := scan(t, ns, state.Prefix(nil)); !slices.Equal(got, []string{"b=2"}) {
		t.Errorf("after Delete, scan = %v", got)
	}
}

func testScanOrder(t *testing.T, db *state.DB) {
	ns := db.Namespace("t/")
	// Byte order, not insertion order: written shuffled, with the edge
	// bytes 0x00 and 0xff.
	keys := []string{"b/1", "a\xff", "", "\xff\xff", "ab", "a", "b", "a\x00", "\xff", "a\x00\x00"}
	for _, k := range keys {
		put(t, ns, k, "v")
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	kv := func(ks ...string) []string {
		out := make([]string, len(ks))
		for i, k := range ks {
			out[i] = k + "=v"
		}
		return out
	}
	rev := func(s []string) []string {
		s = slices.Clone(s)
		slices.Reverse(s)
		return s
	}
	for _, c := range []struct {
		name string
		r    state.Range
		want []string
	}{
		{"all", state.Prefix(nil), kv(sorted...)},
		{"all reverse", state.Range{Reverse: true}, rev(kv(sorted...))},
		{"prefix a", state.Prefix([]byte("a")), kv("a", "a\x00", "a\x00\x00", "ab", "a\xff")},
		{"range reverse", state.Range{Start: []byte("a"), End: []byte("b"), Reverse: true}, rev(kv("a", "a\x00", "a\x00\x00", "ab", "a\xff"))},
		{"prefix a-nul", state.Prefix([]byte("a\x00")), kv("a\x00", "a\x00\x00")},
		{"prefix 0xff", state.Prefix([]byte("\xff")), kv("\xff", "\xff\xff")},
		{"prefix none", state.Prefix([]byte("c")), nil},
		{"start inclusive end exclusive", state.Range{Start: []byte("a\x00"), End: []byte("b")}, kv("a\x00", "a\x00\x00", "ab", "a\xff")},
		{"open end", state.Range{Start: []byte("b")}, kv("b", "b/1", "\xff", "\xff\xff")},
		{"open start", state.Range{End: []byte("a\x00")}, kv("", "a")},
		{"empty range", state.Range{Start: []byte("b"), End: []byte("b")}, nil},
		{"inverted range", state.Range{Start: []byte("c"), End: []byte("a")}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := scan(t, ns, c.r); !slices.Equal(got, c.want) {
				t.Errorf("scan %+v\n got %q\nwant %q", c.r, got, c.want)
			}
		})
	}
}

var errStop = errors.New("stop")

func testScanStops(t *testing.T, db *state.DB) {
	ns := db.Namespace("t/")
	put(t, ns, "a", "1", "b", "2", "c", "3", "d", "4")
	for _, r := range []state.Range{{}, {Reverse: true}} {
		var seen []string
		err := ns.Scan(context.Background(), r, func(k, _ []byte) error {
			seen = append(seen, string(k))
			if len(seen) == 2 {
				return errStop
			}
			return nil
		})
		if err != errStop {
			t.Errorf("reverse=%v: Scan returned %v, want fn's error as it is", r.Reverse, err)
		}
		want := []string{"a", "b"}
		if r.Reverse {
			want = []string{"d", "c"}
		}
		if !slices.Equal(seen, want) {
			t.Errorf("reverse=%v: saw %v, want %v", r.Reverse, seen, want)
		}
	}
}

// testScanSnapshot: a write that commits while a scan runs is not seen by
// it. The write comes from another goroutine, as the package doc asks.
func testScanSnapshot(t *testing.T, db *state.DB) {
	ctx := context.Background()
	ns := db.Namespace("t/")
	put(t, ns, "a", "1", "c", "3")
	var seen []string
	err := ns.Scan(ctx, state.Range{}, func(k, v []byte) error {
		if string(k) == "a" {
			done := make(chan error)
			go func() {
				var b state.Batch
				b.Put([]byte("b"), []byte("2"))
				b.Delete([]byte("c"))
				done <- ns.Apply(ctx, &b)
			}()
			if err := <-done; err != nil {
				return err
			}
		}
		seen = append(seen, string(k)+"="+string(v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"a=1", "c=3"}) {
		t.Errorf("scan saw %v, want the view from its start", seen)
	}
	if got := scan(t, ns, state.Range{}); !slices.Equal(got, []string{"a=1", "b=2"}) {
		t.Errorf("after: %v", got)
	}
}

func testNamespaces(t *testing.T, db *state.DB) {
	ctx := context.Background()
	// "m/a/" and "m/ab/": neither is a prefix of the other.
	a, ab, again := db.Namespace("m/a/"), db.Namespace("m/ab/"), db.Namespace("m/a/")
	put(t, a, "k", "a", "x", "a")
	put(t, ab, "k", "ab")
	if got := get(t, again, "k"); got != "a" {
		t.Errorf("the same prefix twice reads %q, want a's key", got)
	}
	if got := scan(t, a, state.Prefix(nil)); !slices.Equal(got, []string{"k=a", "x=a"}) {
		t.Errorf("m/a/ scans %v", got)
	}
	if got := scan(t, ab, state.Range{Reverse: true}); !slices.Equal(got, []string{"k=ab"}) {
		t.Errorf("m/ab/ scans %v", got)
	}
	var b state.Batch
	b.DeletePrefix(nil)
	if err := a.Apply(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if got := scan(t, a, state.Range{}); len(got) != 0 {
		t.Errorf("m/a/ after deleting its every key: %v", got)
	}
	if got := get(t, ab, "k"); got != "ab" {
		t.Errorf("deleting m/a/ took m/ab/'s key: %q", got)
	}
}

// testOwnersNamespaces: the namespaces cmd hands sessions and admin keep
// the same key apart.
func testOwnersNamespaces(t *testing.T, db *state.DB) {
	ctx := context.Background()
	pins, admin := db.Namespace("m/sessions/"), db.Namespace("m/admin/")
	pins.Put(ctx, []byte("pin/s1"), []byte("ep1"))
	pins.Put(ctx, []byte("pin/s2"), []byte("ep2"))
	admin.Put(ctx, []byte("pin/s1"), []byte("other"))
	if v, err := pins.Get(ctx, []byte("pin/s1")); err != nil || string(v) != "ep1" {
		t.Errorf("get: %q %v", v, err)
	}
	var keys []string
	pins.Scan(ctx, state.Prefix([]byte("pin/")), func(k, v []byte) error { keys = append(keys, string(k)+"="+string(v)); return nil })
	if strings.Join(keys, ",") != "pin/s1=ep1,pin/s2=ep2" {
		t.Errorf("scan: %v", keys)
	}
	pins.Delete(ctx, []byte("pin/s1"))
	if _, err := pins.Get(ctx, []byte("pin/s1")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
}

// testPrefixScan: a prefix scan sees only its prefix, in order.
func testPrefixScan(t *testing.T, db *state.DB) {
	ctx := context.Background()
	kv := db.Namespace("m/admin/")
	if _, err := kv.Get(ctx, []byte("a")); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	for _, k := range []string{"p/b", "p/a", "q/a"} {
		kv.Put(ctx, []byte(k), []byte(k))
	}
	var got []string
	kv.Scan(ctx, state.Prefix([]byte("p/")), func(k, v []byte) error { got = append(got, string(k)+"="+string(v)); return nil })
	if strings.Join(got, ",") != "p/a=p/a,p/b=p/b" {
		t.Errorf("Scan: %v", got)
	}
	kv.Delete(ctx, []byte("p/a"))
	if _, err := kv.Get(ctx, []byte("p/a")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("after Delete: %v", err)
	}
}

func testBatchOrder(t *testing.T, db *state.DB) {
	ctx := context.Background()
	ns := db.Namespace("t/")
	put(t, ns, "p/x", "old", "p/y", "old", "pq", "outside", "gone", "old")
	var b state.Batch
	b.Put([]byte("k1"), []byte("1"))
	b.Delete([]byte("k1"))                 // a delete after a put wins
	b.Put([]byte("p/early"), nil)          // a put before a DeletePrefix goes with it
	b.DeletePrefix([]byte("p/"))           // p/x, p/y, p/early; not pq
	b.Put([]byte("p/keep"), []byte("new")) // a put after it survives
	b.Put([]byte("k2"), []byte("2"))
	b.Put([]byte("k2"), []byte("2b")) // the last put wins
	b.Delete([]byte("gone"))
	if b.Len() != 8 {
		t.Errorf("Len = %d, want 8", b.Len())
	}
	if err := ns.Apply(ctx, &b); err != nil {
		t.Fatal(err)
	}
	want := []string{"k2=2b", "p/keep=new", "pq=outside"}
	if got := scan(t, ns, state.Range{}); !slices.Equal(got, want) {
		t.Errorf("after batch: %v, want %v", got, want)
	}
}

// testBatchAtomic: writers rewrite a set of keys in one batch each, some
// synced and some not, some after a DeletePrefix of the set; readers must
// only ever see a whole set, all of one batch.
func testBatchAtomic(t *testing.T, db *state.DB) {
	ctx := context.Background()
	ns := db.Namespace("t/")
	const keys = 8
	write := func(gen string, b *state.Batch, clear bool) {
		if clear {
			b.DeletePrefix([]byte("set/"))
		}
		for i := range keys {
			b.Put(fmt.Appendf(nil, "set/%d", i), []byte(gen))
		}
	}
	var first state.Batch
	write("init", &first, false)
	if err := ns.Apply(ctx, &first); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var writers, readers sync.WaitGroup
	for w := range 4 {
		writers.Go(func() {
			for i := range 40 {
				b := state.Batch{Sync: i%4 == 0}
				write(fmt.Sprintf("w%d-%d", w, i), &b, i%2 == 0)
				if err := ns.Apply(ctx, &b); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				var gens []string
				err := ns.Scan(ctx, state.Prefix([]byte("set/")), func(_, v []byte) error {
					gens = append(gens, string(v))
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				if len(gens) != keys || len(slices.Compact(slices.Clone(gens))) != 1 {
					t.Errorf("saw a part of a batch: %v", gens)
					return
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
}

// repeated is a state.Value: n bytes of s repeated, written by the
// store.
type repeated struct {
	s string
	n int
}

func (r repeated) Len() int { return r.n }

func (r repeated) AppendTo(b []byte) []byte {
	for range r.n / len(r.s) {
		b = append(b, r.s...)
	}
	return append(b, r.s[:r.n%len(r.s)]...)
}

// testPutValue: a Value is stored as the bytes it writes, in the batch's
// order among other writes, large or empty; one that writes other than
// its length is a bug, and panics.
func testPutValue(t *testing.T, db *state.DB) {
	ctx := context.Background()
	ns := db.Namespace("t/")
	put(t, ns, "v/old", "old")
	big := repeated{"lorem ipsum ", 1<<20 + 7}
	var b state.Batch
	b.PutValue([]byte("v/early"), repeated{"x", 3}) // goes with the DeletePrefix
	b.DeletePrefix([]byte("v/"))
	b.PutValue([]byte("v/big"), big)
	b.Put([]byte("v/plain"), []byte("plain"))
	b.PutValue([]byte("v/empty"), repeated{"x", 0})
	b.PutValue([]byte("v/small"), repeated{"ab", 5})
	if err := ns.Apply(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if got := get(t, ns, "v/big"); got != string(big.AppendTo(nil)) {
		t.Errorf("v/big: %d bytes, %.40q…, want %d", len(got), got, big.n)
	}
	want := []string{"v/empty=", "v/plain=plain", "v/small=ababa"}
	if got := scan(t, ns, state.Range{Start: []byte("v/c")}); !slices.Equal(got, want) {
		t.Errorf("after batch: %v, want %v", got, want)
	}

	var lying state.Batch
	lying.PutValue([]byte("v/lie"), liar{})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a Value that wrote past its length did not panic")
			}
		}()
		ns.Apply(ctx, &lying)
	}()
	if got := get(t, ns, "v/lie"); got != "<missing>" {
		t.Errorf("a Value that panicked was stored: %q", got)
	}
}

// liar says it is 2 bytes long and writes 3.
type liar struct{}

func (liar) Len() int                 { return 2 }
func (liar) AppendTo(b []byte) []byte { return append(b, "abc"...) }

func testEmptyBatch(t *testing.T, db *state.DB) {
	ns := db.Namespace("t/")
	if err := ns.Apply(context.Background(), &state.Batch{Sync: true}); err != nil {
		t.Errorf("empty batch: %v", err)
	}
	if got := scan(t, ns, state.Range{}); len(got) != 0 {
		t.Errorf("empty batch wrote %v", got)
	}
}

// everyOp calls each method of ns once, writing keys "a" and "b", and
// returns each one's error by name.
func everyOp(ctx context.Context, ns state.Namespace) map[string]error {
	var b state.Batch
	b.Put([]byte("b"), []byte("1"))
	_, getErr := ns.Get(ctx, []byte("a"))
	return map[string]error{
		"Get":    getErr,
		"Put":    ns.Put(ctx, []byte("a"), []byte("2")),
		"Delete": ns.Delete(ctx, []byte("a")),
		"Apply":  ns.Apply(ctx, &b),
		"Scan":   ns.Scan(ctx, state.Range{}, func(_, _ []byte) error { return nil }),
	}
}

func testCancelled(t *testing.T, db *state.DB) {
	ns := db.Namespace("t/")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, err := range everyOp(ctx, ns) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v", name, err)
		}
	}
	if got := scan(t, ns, state.Range{}); len(got) != 0 {
		t.Errorf("cancelled writes wrote %v", got)
	}
}

func testClosed(t *testing.T, db *state.DB) {
	ctx := context.Background()
	ns := db.Namespace("t/")
	put(t, ns, "a", "1")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range everyOp(ctx, ns) {
		if !errors.Is(err, state.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// testCloseUnderLoad: Close waits for the operations in flight, and
// operations after it answer ErrClosed; none reaches a closed engine.
func testCloseUnderLoad(t *testing.T, db *state.DB) {
	ctx := context.Background()
	ns := db.Namespace("t/")
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := 0; ; i++ {
				k := fmt.Appendf(nil, "k/%d/%d", g, i)
				b := state.Batch{Sync: i%2 == 0}
				b.Put(k, k)
				err := ns.Apply(ctx, &b)
				if err == nil {
					_, err = ns.Get(ctx, k)
				}
				if err == nil {
					err = ns.Scan(ctx, state.Prefix(fmt.Appendf(nil, "k/%d/", g)), func(_, _ []byte) error { return nil })
				}
				if err == nil {
					err = ns.Delete(ctx, k)
				}
				if err != nil {
					if !errors.Is(err, state.ErrClosed) {
						t.Errorf("after Close: %v, want ErrClosed", err)
					}
					return
				}
			}
		})
	}
	close(start)
	time.Sleep(10 * time.Millisecond)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestNamespacePrefixes: a prefix ends in '/' and overlaps no other; the
// same one twice is allowed.
func TestNamespacePrefixes(t *testing.T) {
	for _, c := range []struct {
		name  string
		taken []string
		ask   string
		panic string // a substring of the panic; "" for none
	}{
		{name: "fine", taken: []string{"rs/", "m/admin/"}, ask: "m/sessions/"},
		{name: "again", taken: []string{"m/admin/"}, ask: "m/admin/"},
		{name: "no slash", ask: "rs", panic: "does not end in '/'"},
		{name: "empty", ask: "", panic: "does not end in '/'"},
		{name: "inside another", taken: []string{"m/"}, ask: "m/admin/", panic: "overlaps"},
		{name: "around another", taken: []string{"m/admin/"}, ask: "m/", panic: "overlaps"},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := state.NewMemory()
			defer db.Close()
			for _, p := range c.taken {
				db.Namespace(p)
			}
			defer func() {
				r := recover()
				switch {
				case c.panic == "" && r != nil:
					t.Errorf("panicked: %v", r)
				case c.panic != "" && (r == nil || !strings.Contains(fmt.Sprint(r), c.panic)):
					t.Errorf("panic %v, want one saying %q", r, c.panic)
				}
			}()
			db.Namespace(c.ask)
		})
	}
}

// TestPebbleReopen: what was written, synced or not, is there after a
// clean Close and a new OpenPebble, under the raw keys the namespace's
// prefix and the key make, so an existing data dir reads.
func TestPebbleReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openPebble(t, dir)
	ns := db.Namespace("m/admin/")
	put(t, ns, "tenants/acme", "synced")
	var b state.Batch // unsynced: the clean Close makes it durable
	b.Put([]byte("tenants/beta"), []byte("unsynced"))
	if err := ns.Apply(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A fresh DB has handed out no prefix, so a namespace around the
	// first one may read its raw keys.
	db = openPebble(t, dir)
	want := []string{"admin/tenants/acme=synced", "admin/tenants/beta=unsynced"}
	if got := scan(t, db.Namespace("m/"), state.Range{}); !slices.Equal(got, want) {
		t.Errorf("after reopen: %v, want %v", got, want)
	}
}
