package responses

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-gateway/turnpike/gossip"
	"github.com/turnpike-gateway/turnpike/jobs/jobstest"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
)

// The claims of the tests below are on a clock the test moves
// (jobstest.Leases): one runs out when the test moves the clock past it,
// never because a loaded machine ran a renewal late. shortLease makes the
// renewals, the scans for unclaimed responses and the reads of cancels
// come every few milliseconds, so that the tests take milliseconds; they
// wait for outcomes, not for time to pass.
var shortLease = Config{CollectInterval: -1, JobLease: 150 * time.Millisecond, JobPoll: 10 * time.Millisecond}

// clockStore is a StateStore for gateways to share, over a namespace
// whose claims are held on the clock of the test (jobstest.Leases), with
// the state store's rules: a claim is live until its ttl has passed,
// taken by anyone once it is not, renewed only by its holder while it is.
type clockStore struct {
	*StateStore
	leases *jobstest.Leases
}

// sharedStore is a fresh store for gateways to share, its claims on a
// clock that stands still until advance.
func sharedStore(t *testing.T) *clockStore {
	leases := jobstest.NewLeases(openStore(t, t.TempDir()).Namespace(), jobstest.NewClock())
	return &clockStore{StateStore: NewStore(leases, StoreOptions{}), leases: leases}
}

// faulty is one more gateway's StateStore on the shared store, over a
// namespace that takes faults and counts what it is asked.
func (l *clockStore) faulty() (*StateStore, *faultyNamespace) {
	ns := faulty(l.leases)
	return NewStore(ns, StoreOptions{}), ns
}

// advance moves the claims' clock on by d.
func (l *clockStore) advance(d time.Duration) { l.leases.Clock.Advance(d) }

// renewedNow reports whether holder holds the claim on id for a whole ttl
// from the clock's present reading: it took or renewed it since the last
// advance.
func (l *clockStore) renewedNow(id, holder string, ttl time.Duration) bool {
	return l.leases.RenewedNow(jobKeys.Lease+id, holder, ttl)
}

// cancelRequests lists the cancels requested and not yet cleared.
func cancelRequests(t *testing.T, st *StateStore) []string {
	t.Helper()
	var ids []string
	err := st.Namespace().Scan(t.Context(), state.Prefix([]byte(pfxStop)), func(k, _ []byte) error {
		ids = append(ids, string(k[len(pfxStop):]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// startOn starts a service on st as one more gateway sharing the store.
func startOn(t *testing.T, st *StateStore, eng Engine, cfg Config) *Service {
	t.Helper()
	svc := New(st, eng, cfg)
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	return svc
}

// waitStatus waits for response id to end, as read through svc.
func waitStatus(t *testing.T, svc *Service, id string) *wire.Response {
	t.Helper()
	var got *wire.Response
	waitFor(t, func() bool {
		r, err := svc.Get(context.Background(), "a", id)
		if err != nil {
			t.Fatal(err)
		}
		got = r
		return r.Ended()
	})
	return got
}

// TestBackgroundClaimedOnce: a gateway that starts while another runs a
// background response, and renews its claim, leaves it alone; the response
// runs once.
func TestBackgroundClaimedOnce(t *testing.T) {
	st := sharedStore(t)
	engA := &fakeEngine{block: make(chan struct{})}
	cfgA := shortLease
	cfgA.Holder = "gw-a"
	a := startOn(t, st.StateStore, engA, cfgA)
	resp := createBackground(t, a, "a", "once")
	waitFor(t, func() bool { return len(engA.requests()) == 1 })
	engB := &fakeEngine{}
	stB, scans := st.faulty()
	b := startOn(t, stB, engB, shortLease)
	// Four leases pass, half a lease at a time. After each step a renews
	// its claim, and b scans for unclaimed responses from start to end at
	// least once: the scan that begins after seen is read reads the moved
	// clock, and has ended when the next begins.
	for step := range 8 {
		st.advance(shortLease.JobLease / 2)
		seen := scans.jobScans.Load()
		waitFor(t, func() bool {
			return scans.jobScans.Load() >= seen+2 && st.renewedNow(resp.ID, "gw-a", shortLease.JobLease)
		})
		if b.job(resp.ID) != nil || len(engB.requests()) != 0 {
			t.Fatalf("step %d: b runs a's live background response (%d engine requests)", step, len(engB.requests()))
		}
	}
	close(engA.block)
	if got := waitStatus(t, b, resp.ID); got.Status != wire.StatusCompleted {
		t.Fatalf("status %s", got.Status)
	}
	if n := len(engA.requests()) + len(engB.requests()); n != 1 {
		t.Errorf("%d engine requests, want 1", n)
	}
}

// TestBackgroundCancelOtherGateway: a cancel sent to the gateway that
// does not run the response stops it on the one that does.
func TestBackgroundCancelOtherGateway(t *testing.T) {
	st := sharedStore(t)
	engA := &fakeEngine{block: make(chan struct{})}
	defer close(engA.block)
	// b waits for the end for up to 2×JobLease (stopRemote), long enough
	// for a loaded machine to read the cancel on a and end the response.
	cfg := shortLease
	cfg.JobLease = 10 * time.Second
	a := startOn(t, st.StateStore, engA, cfg)
	b := startOn(t, st.StateStore, &fakeEngine{}, cfg)
	resp := createBackground(t, a, "a", "stop me")
	waitFor(t, func() bool { return len(engA.requests()) == 1 })
	got, err := b.Cancel(t.Context(), "a", resp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != wire.StatusCancelled {
		t.Fatalf("cancel through b: %s, want cancelled", got.Status)
	}
	waitEnded(t, a, resp.ID)
	if keys := cancelRequests(t, st.StateStore); len(keys) != 0 {
		t.Errorf("cancel requests left after the end: %v", keys)
	}
}

// TestBackgroundStreamOtherGateway: a stream resumed through the gateway
// that does not run the response follows it to its end, from
// starting_after.
func TestBackgroundStreamOtherGateway(t *testing.T) {
	st := sharedStore(t)
	engA := &fakeEngine{block: make(chan struct{})}
	a := startOn(t, st.StateStore, engA, shortLease)
	b := startOn(t, st.StateStore, &fakeEngine{}, shortLease)
	resp := createBackground(t, a, "a", "follow me there")
	waitFor(t, func() bool { return len(engA.requests()) == 1 })
	type ev struct {
		typ string
		seq int
	}
	var mu sync.Mutex
	var got []ev
	done := make(chan error, 1)
	go func() {
		done <- b.Stream(t.Context(), "a", resp.ID, 1, SinkFunc(func(typ string, data []byte) error {
			var e Event
			json.Unmarshal(data, &e)
			mu.Lock()
			got = append(got, ev{typ, e.SequenceNumber})
			mu.Unlock()
			return nil
		}))
	}()
	// The follower is waiting on events a has not made yet.
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) > 0 })
	close(engA.block)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream through b did not end 10s after the response")
	}
	mu.Lock()
	defer mu.Unlock()
	if got[0].seq != 2 || got[len(got)-1].typ != "response.completed" {
		t.Fatalf("events %v: want from sequence 2 to response.completed", got)
	}
	for i := range got {
		if got[i].seq != got[0].seq+i {
			t.Fatalf("events %v: a gap or a repeat", got)
		}
	}
	if want := eventTypes(t, st.StateStore, resp.ID); len(want) != 2+len(got) {
		t.Errorf("%d events stored, %d streamed after 1", len(want), len(got))
	}
}

// TestBackgroundTakeOver: when the gateway running a response stops
// renewing its claim, another gateway takes the response over and ends
// it; the first, coming back with its own answer finished, finds the
// claim gone and stops without ending it a second time.
func TestBackgroundTakeOver(t *testing.T) {
	st := sharedStore(t)
	engA := &fakeEngine{block: make(chan struct{})}
	// a stands for a gateway that stops answering (a long pause, a
	// network partition) while it runs a response: its claim renewals
	// hang from the start until released, so its claim runs out while
	// its engine request waits.
	stA, ss := st.faulty()
	ss.stalled = make(chan struct{})
	a := startOn(t, stA, engA, shortLease)
	unstall := sync.OnceFunc(func() { close(ss.stalled) })
	t.Cleanup(unstall) // before a's Close, which waits for the renewals
	resp := createBackground(t, a, "a", "carry on")
	waitFor(t, func() bool { return len(engA.requests()) == 1 })
	// a has stored the response as pending and as in progress; its only
	// synced write from here on would be the response's end.
	ends := ss.syncs.Load()
	engB := &fakeEngine{}
	b := startOn(t, st.StateStore, engB, shortLease)
	st.advance(shortLease.JobLease)
	got := waitStatus(t, b, resp.ID)
	if got.Status != wire.StatusCompleted || got.Output[0].Text() != "echo: carry on" {
		t.Fatalf("taken over: %s %+v", got.Status, got.Error)
	}
	close(engA.block) // a's answer is done; its end waits on the claim
	// a renews its claims one round at a time, the next round after the
	// one that hangs: a second renewal waiting is a's check of its claim
	// before it ends the response. (An a that ends it without one is
	// caught below.)
	waitFor(t, func() bool { return ss.renewals.Load() >= 2 || a.job(resp.ID) == nil })
	unstall() // a's check of its claim now finds it gone
	waitEnded(t, a, resp.ID)
	if got, _ := a.Get(t.Context(), "a", resp.ID); got.Status != wire.StatusCompleted || got.Output[0].Text() != "echo: carry on" {
		t.Errorf("after a stopped: %s, want b's completed", got.Status)
	}
	if n := ss.syncs.Load() - ends; n != 0 {
		t.Errorf("a ended the response %d times after losing its claim", n)
	}
	if n := testutil.ToFloat64(a.claimsLost); n != 1 {
		t.Errorf("a lost %v claims, want 1", n)
	}
	if len(engB.requests()) != 1 {
		t.Errorf("b sent %d engine requests, want 1", len(engB.requests()))
	}
}

// TestBackgroundQueueCapsAcrossGateways: with a HeldExchange on each, the
// background caps count both gateways' responses: a tenant at its cap on
// one gateway is refused on the other, and so is anyone once the two
// together hold the service's cap; when the responses end, both admit
// again. Without the exchange each would admit its own cap.
func TestBackgroundQueueCapsAcrossGateways(t *testing.T) {
	st := sharedStore(t)
	cfg := shortLease
	cfg.MaxQueued, cfg.MaxQueuedPerTenant = 3, 2
	engA, engB := &fakeEngine{block: make(chan struct{})}, &fakeEngine{block: make(chan struct{})}
	a, b := startOn(t, st.StateStore, engA, cfg), startOn(t, st.StateStore, engB, cfg)
	bus := &gossip.Loopback{}
	for _, svc := range []*Service{a, b} {
		x, err := svc.HeldExchange(gossip.Config{Transport: bus, Interval: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		x.Start(t.Context())
		t.Cleanup(func() { x.Close(context.Background()) })
	}
	refused := func(svc *Service, tenant string) {
		t.Helper()
		_, err := svc.Create(t.Context(), tenant, mustDecode(t, `{"model":"m","input":"x","background":true}`), nil, nil)
		if !errors.Is(err, ErrRateLimited) {
			t.Fatalf("tenant %s over the fleet's cap: %v, want rate_limit_exceeded", tenant, err)
		}
	}
	// peersHold waits until svc has heard that the other gateway holds n.
	peersHold := func(svc *Service, n int) {
		t.Helper()
		waitFor(t, func() bool {
			svc.mu.Lock()
			defer svc.mu.Unlock()
			return svc.mu.peers.Total == n
		})
	}
	r1 := createBackground(t, a, "t", "1")
	r2 := createBackground(t, a, "t", "2")
	peersHold(b, 2)
	refused(b, "t") // the tenant's cap, held on a
	r3 := createBackground(t, b, "u", "1")
	peersHold(a, 1)
	refused(a, "u") // the service's cap: 2 on a, 1 on b
	refused(b, "v")
	close(engA.block)
	close(engB.block)
	for _, r := range []*wire.Response{r1, r2} {
		waitEnded(t, a, r.ID)
	}
	waitEnded(t, b, r3.ID)
	peersHold(b, 0)
	createBackground(t, b, "t", "3")
}
