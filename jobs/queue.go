package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/internal/wait"
	"github.com/turnpike-gateway/turnpike/state"
)

var (
	// ErrCancelled is the cause of a job's context when it is cancelled
	// (Job.Cancel): by a client, here or through the store.
	ErrCancelled = errors.New("jobs: cancelled")
	// ErrLeaseLost is the cause of a job's context when its lease was
	// refused, or not renewed for a whole lease: another process may run
	// the work now, so this one stops without ending it.
	ErrLeaseLost = errors.New("jobs: lease lost")
	// ErrNotRunning is Enqueue's answer before Start and after Close.
	ErrNotRunning = errors.New("jobs: not running")
)

// renewParallel bounds the renewals in flight at once: each is a write
// that a Redis under appendfsync always fsyncs, and concurrent ones share
// the fsync, so thousands of leases renew well within a lease.
const renewParallel = 32

// releaseTimeout bounds the release of a lease, which runs after the
// job's context has ended.
const releaseTimeout = 5 * time.Second

// Keys name a queue's keys in its owner's namespace: the owner keeps its
// own key layout, and writes or clears a cancel request in the batch that
// writes its record.
type Keys struct {
	// Lease is the prefix of the leases' keys; Cancel that of the cancel
	// requests. Both required with a Namespace.
	Lease, Cancel string
}

func (k Keys) lease(id string) []byte { return []byte(k.Lease + id) }

// CancelKey is the key of the cancel request of work id. Its value is
// not read: the key is the request.
func (k Keys) CancelKey(id string) []byte { return []byte(k.Cancel + id) }

// Options configure a Queue of work of type W.
type Options[W any] struct {
	// Namespace keeps the leases and cancel requests, shared by every
	// process that runs the owner's work. Nil runs work of this process
	// only: no lease, no cancel but Queue.Cancel, no take-over.
	Namespace state.Namespace
	// Keys name the leases and cancel requests in Namespace.
	Keys Keys
	// Holder names this process in its leases; processes sharing a
	// namespace need different ones. Default a random name.
	Holder string
	// Lease is how long a lease lasts unrenewed: renewed every third of
	// it, and the pending work is scanned for free leases every half of
	// it, so work whose process died starts again elsewhere within about
	// 1.5×Lease. Required with a Namespace.
	Lease time.Duration
	// Poll is how often the cancel requests are read. Default a third of
	// Lease.
	Poll time.Duration
	// Clock is what leases are timed and loops wait on; nil means Wall.
	Clock Clock
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Pending lists the ids of the work that has not ended, read from
	// the owner's records: Start and every scan take over those whose
	// lease is free. Required with a Namespace.
	Pending func(ctx context.Context) ([]string, error)
	// Adopt is handed each pending id this process has just leased, and
	// whether a cancel is requested for it. It reads the work again under
	// the lease (its holder may have ended it since Pending read it) and
	// runs it here (Queue.Run) or ends it; a lease it leaves without
	// running anything is released. Required with a Namespace.
	Adopt func(ctx context.Context, id string, cancelRequested bool)
	// Cancelled is called for a job here whose cancel was requested
	// through the store, at each read of the requests until it ends; nil
	// cancels the job (Job.Cancel).
	Cancelled func(j *Job[W])
	// LeaseLost is called once when a job here loses its lease, before
	// its context ends with cause ErrLeaseLost; nil does nothing more
	// than log it.
	LeaseLost func(j *Job[W])
}

// Queue runs an owner's durable work, each piece a Job under a lease of
// the store that one process at a time holds. Build it with New, Start
// it, Close it.
type Queue[W any] struct {
	opts  Options[W]
	ns    state.Namespace
	clock Clock
	log   *slog.Logger

	// ctx is the parent of every job's; Close cancels it.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu struct {
		sync.Mutex
		// protects the fields below
		jobs map[string]*Job[W]
		// taking are the ids leased (or being leased) here and not yet
		// running: by Enqueue before its store, by a scan before Adopt.
		// A scan must not take them over: this holder's lease would be
		// granted.
		taking  map[string]struct{}
		started bool
		closed  bool
	}
}

// New validates opts and builds a Queue. It starts nothing.
func New[W any](opts Options[W]) (*Queue[W], error) {
	if opts.Namespace != nil {
		var errs []error
		if opts.Lease <= 0 {
			errs = append(errs, errors.New("jobs: a lease must be positive"))
		}
		if opts.Keys.Lease == "" || opts.Keys.Cancel == "" || opts.Keys.Lease == opts.Keys.Cancel {
			errs = append(errs, fmt.Errorf("jobs: keys %+v: lease and cancel prefixes must differ and not be empty", opts.Keys))
		}
		if opts.Pending == nil || opts.Adopt == nil {
			errs = append(errs, errors.New("jobs: Pending and Adopt are required with a namespace"))
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	if opts.Poll <= 0 {
		opts.Poll = opts.Lease / 3
	}
	if opts.Holder == "" {
		var b [8]byte
		rand.Read(b[:])
		opts.Holder = "gw_" + hex.EncodeToString(b[:])
	}
	if opts.Clock == nil {
		opts.Clock = Wall
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	q := &Queue[W]{opts: opts, ns: opts.Namespace, clock: opts.Clock, log: opts.Logger}
	q.ctx, q.stop = context.WithCancel(context.Background())
	q.mu.jobs = make(map[string]*Job[W])
	q.mu.taking = make(map[string]struct{})
	return q, nil
}

// Holder is the name of this process in its leases.
func (q *Queue[W]) Holder() string { return q.opts.Holder }

// Start takes over the pending work whose lease is free (all of it, at a
// start on a store of its own), then renews the leases, reads the cancel
// requests and scans for free leases until Close. ctx bounds the first
// scan.
func (q *Queue[W]) Start(ctx context.Context) error {
	q.mu.Lock()
	if q.mu.started || q.mu.closed {
		q.mu.Unlock()
		return errors.New("jobs: started twice, or after Close")
	}
	q.mu.started = true
	q.mu.Unlock()
	if q.ns == nil {
		return nil
	}
	if err := q.TakeOver(ctx); err != nil {
		return err
	}
	q.wg.Add(3)
	go q.loop(q.opts.Lease/3, q.renew)
	go q.loop(q.opts.Poll, q.readCancels)
	go q.loop(q.opts.Lease/2, func() {
		if err := q.TakeOver(q.ctx); err != nil && q.ctx.Err() == nil {
			q.log.Warn("looking for work to take over failed", "err", err)
		}
	})
	return nil
}

func (q *Queue[W]) loop(d time.Duration, fn func()) {
	defer q.wg.Done()
	every(q.ctx, q.clock, d, fn)
}

// Close stops every job and waits for them, up to ctx. Work stopped by
// Close is not ended: it stays pending, and its lease is released so that
// the next Start, or another process within half a lease, runs it again.
// (A process that dies leaves its leases to run out first.)
func (q *Queue[W]) Close(ctx context.Context) error {
	q.mu.Lock()
	q.mu.closed = true
	q.mu.Unlock()
	q.stop()
	if err := wait.Group(ctx, &q.wg); err != nil {
		return fmt.Errorf("jobs: close: %w", err)
	}
	return nil
}

// Enqueue adds new work id and runs it here: it leases id, then calls
// store to store the work as pending, then runs run on w. The lease comes
// before the store so that no other process scanning for pending work
// takes it first. When the lease or store fails nothing runs, the lease is
// released and the error returned. Closed after the store, the work stays
// pending for whoever starts next, and Enqueue answers nil.
func (q *Queue[W]) Enqueue(ctx context.Context, id string, w W, store func(ctx context.Context) error, run func(ctx context.Context, j *Job[W])) error {
	q.mu.Lock()
	if !q.mu.started || q.mu.closed {
		q.mu.Unlock()
		return ErrNotRunning
	}
	q.mu.taking[id] = struct{}{}
	q.mu.Unlock()
	defer q.untake(id)
	if q.ns != nil {
		// The id is new: the lease fails only when the store does.
		if ok, err := q.ns.Lease(ctx, q.opts.Keys.lease(id), q.opts.Holder, q.opts.Lease); err != nil || !ok {
			return errors.Join(fmt.Errorf("jobs: leasing new work %s", id), err)
		}
	}
	if err := store(ctx); err != nil {
		q.release(id)
		return err
	}
	if !q.Run(id, w, run) {
		q.release(id)
	}
	return nil
}

// Run runs run on w as job id in a goroutine of its own, the owner of the
// work until run returns; then the job's lease is released, unless it was
// lost. With a Namespace it is called with id's lease held: by Enqueue, or
// by Adopt. It reports false, running nothing, when job id runs here
// already or the queue is closed.
func (q *Queue[W]) Run(id string, w W, run func(ctx context.Context, j *Job[W])) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed || q.mu.jobs[id] != nil {
		return false
	}
	delete(q.mu.taking, id)
	ctx, cancel := context.WithCancelCause(q.ctx)
	j := &Job[W]{ID: id, Work: w, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	j.renewed.Store(q.clock.Now().UnixNano())
	q.mu.jobs[id] = j
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		defer func() {
			q.mu.Lock()
			delete(q.mu.jobs, id)
			q.mu.Unlock()
			// A lost lease is not ours to give; one this process holds
			// is freed at once, whether the work ended or Close stopped
			// it, so the next holder need not wait for it to run out.
			if !j.lost.Load() {
				q.release(id)
			}
			cancel(nil)
			close(j.done)
		}()
		run(ctx, j)
	}()
	return true
}

// Get is job id when it runs here, else nil.
func (q *Queue[W]) Get(id string) *Job[W] {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.jobs[id]
}

// Len is the number of jobs running here.
func (q *Queue[W]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.mu.jobs)
}

// Jobs is a snapshot of the jobs running here.
func (q *Queue[W]) Jobs() []*Job[W] {
	q.mu.Lock()
	defer q.mu.Unlock()
	jobs := make([]*Job[W], 0, len(q.mu.jobs))
	for _, j := range q.mu.jobs {
		jobs = append(jobs, j)
	}
	return jobs
}

// take marks id as being taken here; false when it runs here already, is
// being taken, or the queue is closed.
func (q *Queue[W]) take(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, taking := q.mu.taking[id]; taking || q.mu.jobs[id] != nil || q.mu.closed {
		return false
	}
	q.mu.taking[id] = struct{}{}
	return true
}

// untake clears take's mark; true when it was still set (nothing ran).
func (q *Queue[W]) untake(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, taking := q.mu.taking[id]
	delete(q.mu.taking, id)
	return taking
}

// TakeOver leases each pending piece of work that no process holds and
// hands it to Options.Adopt. Start runs it, then the scan every half
// lease: one at a time, so two take-overs of one queue never race.
func (q *Queue[W]) TakeOver(ctx context.Context) error {
	ids, err := q.opts.Pending(ctx)
	if err != nil || len(ids) == 0 {
		return err
	}
	cancels, err := q.cancelRequests(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !q.take(id) {
			continue
		}
		ok, err := q.ns.Lease(ctx, q.opts.Keys.lease(id), q.opts.Holder, q.opts.Lease)
		if err != nil || !ok {
			q.untake(id)
			if err != nil {
				return err
			}
			continue // another process runs it
		}
		q.opts.Adopt(ctx, id, slices.Contains(cancels, id))
		if q.untake(id) {
			q.release(id)
		}
	}
	return nil
}

// renew renews the leases of the jobs here. A lease refused (this process
// was too slow to renew it, so another may run the work now, or have
// ended it), or failing to renew for a whole lease, stops the job here
// without ending the work.
func (q *Queue[W]) renew() {
	var wg sync.WaitGroup
	slots := make(chan struct{}, renewParallel)
	for _, j := range q.Jobs() {
		if j.lost.Load() {
			continue // stopping already
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			q.renewOne(j)
		}()
	}
	wg.Wait()
}

func (q *Queue[W]) renewOne(j *Job[W]) {
	ok, err := q.ns.Renew(q.ctx, q.opts.Keys.lease(j.ID), q.opts.Holder, q.opts.Lease)
	now := q.clock.Now()
	switch {
	case q.ctx.Err() != nil:
	case err == nil && ok:
		j.renewed.Store(now.UnixNano())
	case err == nil || now.Sub(time.Unix(0, j.renewed.Load())) >= q.opts.Lease:
		q.lose(j)
	default:
		q.log.Warn("renewing a lease failed", "job", j.ID, "err", err)
	}
}

// lose stops j here: its lease is another's now. A second call returns
// once the first has run.
func (q *Queue[W]) lose(j *Job[W]) {
	j.lose.Do(func() {
		j.lost.Store(true)
		q.log.Warn("a job's lease ran out; left to whoever takes it over", "job", j.ID)
		if q.opts.LeaseLost != nil {
			q.opts.LeaseLost(j)
		}
		j.cancel(ErrLeaseLost)
	})
}

// Keep renews j's lease once more, for work about to write its end: false
// when the lease is lost, and the work must not end (its holder now runs
// it, and would end it a second time). A store that fails leaves it true:
// a write of the end that the store refuses fails anyway.
func (q *Queue[W]) Keep(ctx context.Context, j *Job[W]) bool {
	if q.ns == nil {
		return true
	}
	ok, err := q.ns.Renew(ctx, q.opts.Keys.lease(j.ID), q.opts.Holder, q.opts.Lease)
	if err == nil && !ok || j.lost.Load() {
		q.lose(j) // or wait for the renewal that lost it to be done
		return false
	}
	return true
}

// release gives up this process's lease on id. A release that fails
// leaves the lease to run out.
func (q *Queue[W]) release(id string) {
	if q.ns == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := q.ns.Release(ctx, q.opts.Keys.lease(id), q.opts.Holder); err != nil {
		q.log.Warn("releasing a lease failed", "job", id, "err", err)
	}
}

// Cancel cancels job id when it runs here, and reports whether it does.
func (q *Queue[W]) Cancel(id string) bool {
	j := q.Get(id)
	if j != nil {
		j.Cancel()
	}
	return j != nil
}

// RequestCancel records, durably, that work id is to be cancelled,
// wherever it runs: the process running it reads the request within
// Poll. The request stays until the owner clears it with the work's end
// (a Delete of Keys.CancelKey in the batch that ends it).
func (q *Queue[W]) RequestCancel(ctx context.Context, id string) error {
	return q.ns.Put(ctx, q.opts.Keys.CancelKey(id), nil)
}

// cancelRequests lists the work whose cancel has been requested: one
// scan, however much work runs.
func (q *Queue[W]) cancelRequests(ctx context.Context) ([]string, error) {
	var ids []string
	p := q.opts.Keys.Cancel
	err := q.ns.Scan(ctx, state.Prefix([]byte(p)), func(k, _ []byte) error {
		ids = append(ids, string(k[len(p):]))
		return nil
	})
	return ids, err
}

// readCancels carries out the cancel requests of the jobs here.
func (q *Queue[W]) readCancels() {
	if q.Len() == 0 {
		return
	}
	ids, err := q.cancelRequests(q.ctx)
	if err != nil {
		if q.ctx.Err() == nil {
			q.log.Warn("reading cancel requests failed", "err", err)
		}
		return
	}
	for _, id := range ids {
		j := q.Get(id)
		switch {
		case j == nil:
		case q.opts.Cancelled != nil:
			q.opts.Cancelled(j)
		default:
			j.Cancel()
		}
	}
}

// StopRemote asks whichever process runs work id to stop it, and waits
// until ended reports that the work has ended, for at most 2×Lease (a
// dead process's lease runs out, and the process taking the work over
// ends it cancelled), reading every Poll, or until ctx ends. Past that
// bound it returns nil: the cancel stays requested.
func (q *Queue[W]) StopRemote(ctx context.Context, id string, ended func(ctx context.Context) (bool, error)) error {
	if err := q.RequestCancel(ctx, id); err != nil {
		return err
	}
	deadline := q.clock.Now().Add(2 * q.opts.Lease)
	for q.clock.Now().Before(deadline) {
		if done, err := ended(ctx); err != nil || done {
			return err
		}
		if !Sleep(ctx, q.clock, q.opts.Poll) {
			return ctx.Err()
		}
	}
	return nil
}

// Job is one piece of work running in this process.
type Job[W any] struct {
	// ID names the work, and its lease.
	ID string
	// Work is the owner's.
	Work W

	ctx    context.Context
	cancel context.CancelCauseFunc
	// lost is set when another process may hold the lease now, by lose,
	// once.
	lost atomic.Bool
	lose sync.Once
	// renewed is when the lease was last renewed, in Unix nanoseconds of
	// the queue's clock.
	renewed atomic.Int64
	// done is closed once run has returned and the lease is released.
	done chan struct{}
}

// Cancel stops the job: its context ends with cause ErrCancelled.
func (j *Job[W]) Cancel() { j.cancel(ErrCancelled) }

// Cancelled reports whether the job was cancelled (Cancel) before anything
// else ended it.
func (j *Job[W]) Cancelled() bool { return errors.Is(context.Cause(j.ctx), ErrCancelled) }

// Lost reports whether the job lost its lease.
func (j *Job[W]) Lost() bool { return j.lost.Load() }

// Done is closed once the job's run has returned and its lease is
// released (or was lost).
func (j *Job[W]) Done() <-chan struct{} { return j.done }
