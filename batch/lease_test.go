package batch_test

import (
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/batch"
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
// that stopped renewing its lease is taken over and completed.
func TestBatchLeasesAcrossGateways(t *testing.T) {
	db := state.NewMemory()
	t.Cleanup(func() { db.Close() })
	eng := newEngine(t)
	release := sync.OnceFunc(eng.block(2))
	t.Cleanup(release)
	const lease = 300 * time.Millisecond
	a := newFixture(t, eng, fixtureOptions{db: db, opts: batch.Options{Holder: "gw-a", Lease: lease, Config: batch.Config{Concurrency: 1}}})
	b := newFixture(t, eng, fixtureOptions{db: db, opts: batch.Options{Holder: "gw-b", Lease: lease, Config: batch.Config{Concurrency: 1}}})

	content, _ := lines(6)
	bt := a.create(t, a.upload(t, content).ID)
	a.poll(t, bt.ID, func(b *openai.Batch) bool { return b.RequestCounts.Completed == 2 })
	// Several of B's half-lease scans pass while A holds the batch.
	time.Sleep(3 * lease)
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
	for _, f := range []*fixture{a, b} {
		if err := f.svc.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	ns := db.Namespace("batch/")
	if ok, err := ns.Lease(t.Context(), []byte("lease/"+dead.ID), "gw-dead", lease); err != nil || !ok {
		t.Fatalf("leasing for the dead gateway: %v %v", ok, err)
	}
	hold()
	c2 := newFixture(t, eng, fixtureOptions{db: db, opts: batch.Options{Holder: "gw-c", Lease: lease}})
	done := c2.poll(t, dead.ID, func(b *openai.Batch) bool { return b.Status == openai.BatchStatusCompleted })
	if done.RequestCounts.Completed != 6 {
		t.Fatalf("taken-over batch %+v", done)
	}
	if got := gaugeValue(t, c2.metrics, "turnpike_batches_resumed_total"); got != 1 {
		t.Errorf("C resumed %v batches, want 1", got)
	}
}
