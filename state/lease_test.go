package state_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

func lease(t *testing.T, ns state.Namespace, key, holder string, ttl time.Duration) bool {
	t.Helper()
	ok, err := ns.Lease(context.Background(), []byte(key), holder, ttl)
	if err != nil {
		t.Fatalf("Lease %q for %s: %v", key, holder, err)
	}
	return ok
}

// testLease: a lease has one holder until it runs out or is released;
// its holder renews it; it is no key of the namespace.
func testLease(t *testing.T, db *state.DB) {
	ns := db.Namespace("rs/")
	ctx := context.Background()
	const long = time.Minute
	if !lease(t, ns, "job/1", "a", long) {
		t.Fatal("a free lease was refused")
	}
	if lease(t, ns, "job/1", "b", long) {
		t.Fatal("b took a's lease while it was held")
	}
	if !lease(t, ns, "job/1", "a", long) {
		t.Fatal("a could not renew its own lease")
	}
	if ok, err := ns.Renew(ctx, []byte("job/1"), "a", long); err != nil || !ok {
		t.Fatalf("a renewing its lease: %v %v", ok, err)
	}
	if ok, err := ns.Renew(ctx, []byte("job/1"), "b", long); err != nil || ok {
		t.Fatalf("b renewed a's lease: %v %v", ok, err)
	}
	if ok, err := ns.Renew(ctx, []byte("job/free"), "b", long); err != nil || ok {
		t.Fatalf("Renew took a free lease: %v %v", ok, err)
	}
	if !lease(t, ns, "job/2", "b", long) {
		t.Fatal("b was refused another key's lease")
	}
	if got := scan(t, ns, state.Range{}); len(got) != 0 {
		t.Errorf("leases seen by Scan: %v", got)
	}
	if _, err := ns.Get(ctx, []byte("job/1")); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("Get of a lease's name: %v, want ErrNotFound", err)
	}
	// b's release of a's lease does nothing; a's frees it.
	if err := ns.Release(ctx, []byte("job/1"), "b"); err != nil {
		t.Fatal(err)
	}
	if lease(t, ns, "job/1", "b", long) {
		t.Fatal("b's release freed a's lease")
	}
	if err := ns.Release(ctx, []byte("job/1"), "a"); err != nil {
		t.Fatal(err)
	}
	if !lease(t, ns, "job/1", "b", long) {
		t.Fatal("a released lease was refused")
	}
	// A lease that runs out is free to another.
	if !lease(t, ns, "job/3", "a", 20*time.Millisecond) {
		t.Fatal("a free lease was refused")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !lease(t, ns, "job/3", "b", long) {
		if time.Now().After(deadline) {
			t.Fatal("a lease of 20ms still held after 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if lease(t, ns, "job/3", "a", long) {
		t.Fatal("a took back its expired lease from b")
	}
	// A holder that paused past its ttl cannot renew, though no one took
	// the lease meanwhile.
	if !lease(t, ns, "job/5", "a", 20*time.Millisecond) {
		t.Fatal("a free lease was refused")
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		ok, err := ns.Renew(ctx, []byte("job/5"), "a", 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("renewals of a lease of 20ms kept succeeding for 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Lease(ctx, []byte("job/4"), "a", long); !errors.Is(err, state.ErrClosed) {
		t.Errorf("Lease after Close: %v, want ErrClosed", err)
	}
	if err := ns.Release(ctx, []byte("job/4"), "a"); !errors.Is(err, state.ErrClosed) {
		t.Errorf("Release after Close: %v, want ErrClosed", err)
	}
}

// testLeaseRace: claimers racing for one lease never both hold it.
func testLeaseRace(t *testing.T, db *state.DB) {
	twoHolders(t, []state.Namespace{db.Namespace("rs/"), db.Namespace("rs/")})
}

// twoHolders races claimers that keep what they win until every one has
// tried: a round with more than one winner is two holders at once.
func twoHolders(t *testing.T, nss []state.Namespace) {
	ctx := context.Background()
	const claimers, rounds = 8, 50
	for round := range rounds {
		key := []byte(fmt.Sprintf("race/%d", round))
		var winners atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := nss[i%len(nss)].Lease(ctx, key, fmt.Sprintf("h%d", i), time.Minute)
				if err != nil {
					t.Error(err)
				} else if ok {
					winners.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := winners.Load(); n != 1 {
			t.Fatalf("round %d: %d of %d claimers hold the lease, want 1", round, n, claimers)
		}
	}
}

// TestRedisLeaseTwoClients: claimers on two connections to one Redis, as
// two gateways are, never both hold a lease; a lease one gateway holds
// with a short ttl passes to the other once it runs out.
func TestRedisLeaseTwoClients(t *testing.T) {
	srv := redistest.Start(t)
	a := openRedis(t, srv.URL(), state.RedisOptions{}).Namespace("rs/")
	b := openRedis(t, srv.URL(), state.RedisOptions{}).Namespace("rs/")
	twoHolders(t, []state.Namespace{a, b})
	if !lease(t, a, "job", "gw-a", 50*time.Millisecond) {
		t.Fatal("a free lease was refused")
	}
	if lease(t, b, "job", "gw-b", time.Minute) {
		t.Fatal("b took a's lease while it was held")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !lease(t, b, "job", "gw-b", time.Minute) {
		if time.Now().After(deadline) {
			t.Fatal("a's lease of 50ms still held after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkLease is one claim renewal (Renew of a held lease) and one
// take of a free lease, on each implementation: what a gateway pays per
// background response for its claim.
func BenchmarkLease(b *testing.B) {
	for _, impl := range implementations {
		b.Run(impl.name, func(b *testing.B) {
			ns := impl.setup(b)(b).Namespace("rs/")
			ctx := context.Background()
			if ok, err := ns.Lease(ctx, []byte("held"), "a", time.Minute); err != nil || !ok {
				b.Fatal(ok, err)
			}
			b.Run("renew", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if ok, err := ns.Renew(ctx, []byte("held"), "a", time.Minute); err != nil || !ok {
						b.Fatal(ok, err)
					}
				}
			})
			b.Run("take-release", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if ok, err := ns.Lease(ctx, []byte("free"), "a", time.Minute); err != nil || !ok {
						b.Fatal(ok, err)
					}
					if err := ns.Release(ctx, []byte("free"), "a"); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
