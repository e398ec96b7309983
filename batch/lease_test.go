package batch_test

import (
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/batch"
	"github.com/turnpike-gateway/turnpike/jobs/jobstest"
	"github.com/turnpike-gateway/turnpike/state"
)

// gaugeValue reads an unlabelled gauge or counter of reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			m := mf.Metric[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// Two gateways on one store: a batch runs on the gateway that leased it
// only, a cancel asked of the other reaches it, and the batch of a gateway
// that stopped renewing its lease is taken over and completed. The leases,
// their renewals and the scans for free ones run on a clock the test
// moves; it waits for the gateways to be idle, never for time to pass.
func TestBatchLeasesAcrossGateways(t *testing.T) {
	clock := jobstest.NewClock()
	db := state.NewMemoryAt(clock.Now)
	t.Cleanup(func() { db.Close() })
	eng := newEngine(t)
	release := sync.OnceFunc(eng.block(2))
	t.Cleanup(release)
	const lease = 30 * time.Second
	a := newFixture(t, eng, fixtureOptions{db: db, opts: batch.Options{Holder: "gw-a", Lease: lease, Clock: clock, Config: batch.Config{Concurrency: 1}}})
	b := newFixture(t, eng, fixtureOptions{db: db, opts: batch.Options{Holder: "gw-b", Lease: lease, Clock: clock, Config: batch.Config{Concurrency: 1}}})
	// tick moves the clock on by d once the gateways' loops (three each:
	// renewals, cancel reads, scans) all wait on it, which they do again
	// once what it woke has run.
	loops := 6
	idle := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for clock.Waiters() != loops {
			if time.Now().After(deadline) {
				t.Fatalf("%d waits on the clock, want %d", clock.Waiters(), loops)
			}
			time.Sleep(time.Millisecond)
		}
	}
	tick := func(d time.Duration) {
		t.Helper()
		idle()
		clock.Advance(d)
		idle()
	}

	content, _ := lines(6)
	bt := a.create(t, a.upload(t, content).ID)
	a.poll(t, bt.ID, func(b *openai.Batch) bool { return b.RequestCounts.Completed == 2 })
	// Three leases pass, a sixth at a time: A renews every third of one,
	// B scans every half.
	for range 18 {
		tick(lease / 6)
	}
	if got := gaugeValue(t, b.metrics, "turnpike_batches_running"); got != 0 {
		t.Fatalf("gateway B runs %v batches while A holds the only one", got)
	}
	if got := gaugeValue(t, a.metrics, "turnpike_batches_running"); got != 1 {
		t.Fatalf("gateway A runs %v batches, want 1", got)
	}

	c, err := b.client.Batches.Cancel(t.Context(), bt.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != openai.BatchStatusCancelling {
		t.Fatalf("cancel on B answered %s", c.Status)
	}
	tick(lease / 3) // A reads the cancel requests
	ended := b.poll(t, bt.ID, ended)
	if ended.Status != openai.BatchStatusCancelled || ended.RequestCounts.Completed != 2 {
		t.Fatalf("batch cancelled on B, run on A: %+v", ended)
	}
	release()

	// A batch whose gateway died holding its lease: stored in progress,
	// its lease held by a holder that never renews. A and B stop (and
	// give their leases back); C, started on the store, must wait for
	// the dead gateway's lease to run out.
	hold := sync.OnceFunc(eng.block(0)) // A gets no answer before it stops
	t.Cleanup(hold)
	before := eng.hits.Load()
	dead := a.create(t, a.upload(t, content).ID)
	for eng.hits.Load() == before {
		time.Sleep(time.Millisecond) // A's first request of it waits in the engine
	}
	idle()
	for _, f := range []*fixture{a, b} {
		if err := f.svc.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Half a lease wakes A's and B's last waits on the clock, left when
	// they closed.
	clock.Advance(lease / 2)
	ns := db.Namespace("batch/")
	if ok, err := ns.Lease(t.Context(), []byte("lease/"+dead.ID), "gw-dead", lease); err != nil || !ok {
		t.Fatalf("leasing for the dead gateway: %v %v", ok, err)
	}
	hold()
	loops = 3
	c2 := newFixture(t, eng, fixtureOptions{db: db, opts: batch.Options{Holder: "gw-c", Lease: lease, Clock: clock}})
	tick(lease / 2)
	if got := gaugeValue(t, c2.metrics, "turnpike_batches_resumed_total"); got != 0 {
		t.Fatalf("C resumed %v batches while the dead gateway's lease ran", got)
	}
	tick(lease / 2) // the lease has run out: C's next scan takes it over
	done := c2.poll(t, dead.ID, func(b *openai.Batch) bool { return b.Status == openai.BatchStatusCompleted })
	if done.RequestCounts.Completed != 6 {
		t.Fatalf("taken-over batch %+v", done)
	}
	if got := gaugeValue(t, c2.metrics, "turnpike_batches_resumed_total"); got != 1 {
		t.Errorf("C resumed %v batches, want 1", got)
	}
}
