package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/turnpike-gateway/turnpike/jobs/jobstest"
	"github.com/turnpike-gateway/turnpike/state"
)

// The spec in testdata/: processes ("gateways") sharing one namespace run
// work under leases on a clock the spec moves. No loop runs on its own:
// the spec renews, reads cancels and scans for free leases with commands,
// so every outcome is in the order the file gives.
//
//	gateway name=<g>                 a process on the shared store (lease 30s, poll 10s)
//	enqueue gw=<g> id=<w> [fail]     new work, run on g (fail: its store fails)
//	renew gw=<g> | cancels gw=<g>    one round of renewals, of cancel reads
//	scan gw=<g>                      one scan for pending work with a free lease
//	advance by=<d>                   move the clock
//	answer gw=<g> id=<w>             the work's attempt succeeds; it ends if it keeps its lease
//	shed gw=<g> id=<w> after=<d>     the work's attempt is refused; it waits to try again
//	await gw=<g> id=<w> attempt=<n>  the work has begun its n-th attempt
//	cancel gw=<g> id=<w>             cancel on the process that runs it
//	request-cancel gw=<g> id=<w>     cancel through the store
//	close gw=<g>                     Close: work here stops, stays pending, leases released
//	store down=<true|false>          leases fail, as a store that is down
//	state                            leases, records and jobs of every gateway
func TestSpec(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := newSpec(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return s.run(t, d)
		})
	})
}

type spec struct {
	clock  *jobstest.Clock
	ns     *jobstest.Leases
	gws    map[string]*owner
	names  []string
	output struct {
		sync.Mutex
		lines []string
	}
}

// owner is the spec's owner of work on one gateway: a record per piece,
// "w/<id>" holding its status.
type owner struct {
	s    *spec
	name string
	q    *Queue[*work]
}

// work is one piece of work as the spec drives it: each attempt waits
// for the spec's outcome.
type work struct {
	outcomes chan outcome
	mu       sync.Mutex
	attempt  int
}

type outcome struct {
	shed  bool
	after time.Duration
}

var keys = Keys{Lease: "l/", Cancel: "c/"}

const (
	specLease = 30 * time.Second
	specPoll  = 10 * time.Second
	// specRetryFor bounds the retries of a refused piece of work.
	specRetryFor = time.Minute
)

func newSpec(t *testing.T) *spec {
	db := state.NewMemory()
	t.Cleanup(func() { db.Close() })
	clock := jobstest.NewClock()
	return &spec{clock: clock, ns: jobstest.NewLeases(db.Namespace("w/"), clock), gws: map[string]*owner{}}
}

func (s *spec) printf(format string, args ...any) {
	s.output.Lock()
	defer s.output.Unlock()
	s.output.lines = append(s.output.lines, fmt.Sprintf(format, args...))
}

// flush is what happened since the last command.
func (s *spec) flush() string {
	s.output.Lock()
	defer s.output.Unlock()
	out := strings.Join(s.output.lines, "\n")
	s.output.lines = nil
	if out == "" {
		return "ok"
	}
	return out
}

func (s *spec) run(t *testing.T, d *datadriven.TestData) string {
	arg := func(k string) string {
		for _, a := range d.CmdArgs {
			if a.Key == k && len(a.Vals) > 0 {
				return a.Vals[0]
			}
		}
		return ""
	}
	dur := func(k string) time.Duration {
		v, err := time.ParseDuration(arg(k))
		if err != nil {
			d.Fatalf(t, "%s: %v", k, err)
		}
		return v
	}
	o := s.gws[arg("gw")]
	job := func() *Job[*work] {
		j := o.q.Get(arg("id"))
		if j == nil {
			d.Fatalf(t, "%s runs no %s", arg("gw"), arg("id"))
		}
		return j
	}
	ctx := context.Background()
	switch d.Cmd {
	case "gateway":
		s.newOwner(t, arg("name"))
	case "enqueue":
		id := arg("id")
		err := o.q.Enqueue(ctx, id, newWork(), func(ctx context.Context) error {
			if d.HasArg("fail") {
				return fmt.Errorf("the store refused %s", id)
			}
			return s.ns.Put(ctx, []byte("w/"+id), []byte("pending"))
		}, o.run)
		if err != nil {
			s.printf("error: %v", err)
		}
	case "renew":
		o.q.renew()
	case "cancels":
		o.q.readCancels()
	case "scan":
		if err := o.q.TakeOver(ctx); err != nil {
			s.printf("error: %v", err)
		}
	case "advance":
		s.clock.Advance(dur("by"))
	case "answer":
		j := job()
		j.Work.outcomes <- outcome{}
		<-j.Done()
	case "shed":
		j := job()
		waiters := s.clock.Waiters()
		j.Work.outcomes <- outcome{shed: true, after: dur("after")}
		// The work waits on the clock, or gave up without waiting.
		s.await(t, d, func() bool {
			select {
			case <-j.Done():
				return true
			default:
				return s.clock.Waiters() > waiters
			}
		})
	case "await":
		j := job()
		var n int
		fmt.Sscan(arg("attempt"), &n)
		s.await(t, d, func() bool {
			j.Work.mu.Lock()
			defer j.Work.mu.Unlock()
			return j.Work.attempt >= n
		})
		j.Work.mu.Lock()
		line := fmt.Sprintf("%s: attempt %d", j.ID, j.Work.attempt)
		j.Work.mu.Unlock()
		if s.clock.Waiters() > 0 {
			line += ", waiting to retry"
		}
		s.printf("%s", line)
	case "cancel":
		j := job()
		o.q.Cancel(j.ID)
		<-j.Done()
	case "request-cancel":
		if err := o.q.RequestCancel(ctx, arg("id")); err != nil {
			s.printf("error: %v", err)
		}
	case "close":
		if err := o.q.Close(ctx); err != nil {
			s.printf("error: %v", err)
		}
	case "store":
		if arg("down") == "true" {
			s.ns.Fail(errors.New("the store is down"))
		} else {
			s.ns.Fail(nil)
		}
	case "state":
		s.state()
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	s.settle()
	return s.flush()
}

// settle waits for every job stopped by the command (cancelled, lease
// lost) to end, so that what it prints belongs to the command.
func (s *spec) settle() {
	for _, name := range s.names {
		for _, j := range s.gws[name].q.Jobs() {
			if j.ctx.Err() != nil {
				<-j.Done()
			}
		}
	}
}

var _ Clock = (*jobstest.Clock)(nil)

// await polls cond: a condition, never a span of time, orders the spec.
func (s *spec) await(t *testing.T, d *datadriven.TestData, cond func() bool) {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			d.Fatalf(t, "%s: condition never held", d.Pos)
		}
		time.Sleep(time.Millisecond)
	}
}

func newWork() *work { return &work{outcomes: make(chan outcome)} }

func (s *spec) newOwner(t *testing.T, name string) {
	o := &owner{s: s, name: name}
	q, err := New(Options[*work]{
		Namespace: s.ns, Keys: keys, Holder: name, Lease: specLease, Poll: specPoll, Clock: s.clock,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Pending: o.pending, Adopt: o.adopt,
		LeaseLost: func(j *Job[*work]) { s.printf("%s: %s lost its lease", name, j.ID) },
	})
	if err != nil {
		t.Fatal(err)
	}
	// Started without its loops: the spec runs their rounds.
	q.mu.started = true
	t.Cleanup(func() { q.Close(context.Background()) })
	o.q = q
	s.gws[name] = o
	s.names = append(s.names, name)
}

func (o *owner) pending(ctx context.Context) ([]string, error) {
	var ids []string
	err := o.s.ns.Scan(ctx, state.Prefix([]byte("w/")), func(k, v []byte) error {
		if string(v) == "pending" {
			ids = append(ids, string(k[2:]))
		}
		return nil
	})
	return ids, err
}

func (o *owner) status(ctx context.Context, id string) string {
	v, err := o.s.ns.Get(ctx, []byte("w/"+id))
	if err != nil {
		return err.Error()
	}
	return string(v)
}

// end writes the work's end and clears its cancel request, in one batch.
func (o *owner) end(ctx context.Context, id, status string) {
	b := state.Batch{Sync: true}
	b.Put([]byte("w/"+id), []byte(status))
	b.Delete(keys.CancelKey(id))
	if err := o.s.ns.Apply(ctx, &b); err != nil {
		o.s.printf("%s: ending %s: %v", o.name, id, err)
		return
	}
	o.s.printf("%s: %s %s", o.name, id, status)
}

func (o *owner) adopt(ctx context.Context, id string, cancelRequested bool) {
	switch st := o.status(ctx, id); {
	case st != "pending":
		o.s.printf("%s: adopt %s: %s already", o.name, id, st)
	case cancelRequested:
		o.s.printf("%s: adopt %s: cancel requested", o.name, id)
		o.end(ctx, id, "cancelled")
	default:
		o.s.printf("%s: adopt %s: run", o.name, id)
		o.q.Run(id, newWork(), o.run)
	}
}

// run is a piece of work's goroutine: attempts until one is answered,
// retrying refusals on the clock, until its context ends.
func (o *owner) run(ctx context.Context, j *Job[*work]) {
	retry := Retry{Clock: o.s.clock, Backoff: Backoff{First: time.Second, Max: 30 * time.Second}, For: specRetryFor}
	w := j.Work
	for n := 1; ; n++ {
		w.mu.Lock()
		w.attempt = n
		w.mu.Unlock()
		var out outcome
		select {
		case out = <-w.outcomes:
		case <-ctx.Done():
		}
		if ctx.Err() == nil && out.shed {
			err := retry.Wait(ctx, n, out.after)
			if err == nil {
				continue
			}
			if err == ErrGaveUp {
				o.s.printf("%s: %s refused for longer than %s", o.name, j.ID, specRetryFor)
				o.end(ctx, j.ID, "failed")
				return
			}
		}
		ctx := context.WithoutCancel(ctx)
		switch {
		case j.Cancelled():
		case j.ctx.Err() != nil:
			// Close, or the lease went to another: the work stays pending.
			o.s.printf("%s: %s stopped, left pending", o.name, j.ID)
			return
		}
		if !o.q.Keep(ctx, j) {
			o.s.printf("%s: %s answered, but its lease is lost: not ended", o.name, j.ID)
			return
		}
		if j.Cancelled() {
			o.end(ctx, j.ID, "cancelled")
			return
		}
		o.end(ctx, j.ID, "completed")
		return
	}
}

func (s *spec) state() {
	var ids []string
	s.ns.Namespace.Scan(context.Background(), state.Prefix([]byte("w/")), func(k, v []byte) error {
		ids = append(ids, string(k[2:]))
		return nil
	})
	for _, id := range ids {
		o := s.gws[s.names[0]]
		line := fmt.Sprintf("%s: %s", id, o.status(context.Background(), id))
		if h, left := s.ns.Holder("l/" + id); h != "" {
			line += fmt.Sprintf(", leased by %s for %s", h, left)
		}
		if _, err := s.ns.Namespace.Get(context.Background(), keys.CancelKey(id)); err == nil {
			line += ", cancel requested"
		}
		s.printf("%s", line)
	}
	for _, name := range s.names {
		var running []string
		for _, j := range s.gws[name].q.Jobs() {
			r := j.ID
			if j.Lost() {
				r += " (lost)"
			}
			running = append(running, r)
		}
		slices.Sort(running)
		s.printf("%s runs [%s]", name, strings.Join(running, " "))
	}
}
