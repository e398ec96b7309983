// Package jobs runs leased durable work: work that an owner (background
// responses, batches, the Redis intake) has stored as pending and that
// must run to its end on exactly one process at a time, whichever
// processes share the store, come and go, or die.
//
// # Overview
//
// A Queue holds the work of one owner. Each piece runs as a Job, in a
// goroutine of its own, under a lease of the state store (state.Namespace
// Lease) that its process renews every third of Options.Lease. Every
// process scans the owner's pending work (Options.Pending) every half
// lease and takes over what no one holds: the work of a process that
// stopped (Close releases its leases at once) or died (its leases run
// out). A cancel reaches the work wherever it runs: Queue.Cancel here, or a
// request in the store (RequestCancel) that the running process reads
// every Options.Poll. Work the fleet refuses for a while is retried with
// Retry: at least the wait the refusal asks, with backoff and jitter, for
// as long as the owner allows. A Queue without a namespace runs work of
// this process only (the intake, whose Redis stream is its own lease).
//
// Time is an injected Clock: leases, loops and retries read it, so a test
// moves a jobstest.Clock and never waits for time to pass. testdata/ is the
// specification, as datadriven files.
//
// # How data enters and leaves
//
// Work enters by Enqueue (new work: leased, then stored by the owner's
// callback, then run) or by Options.Adopt (pending work this process has
// just leased: the owner reads it again under the lease and runs it with
// Run, or ends it). The owner keeps its records and its key layout; Keys
// name the leases and cancel requests in its namespace, so that it clears
// a request in the batch that ends the work. A job leaves when its run
// returns: its lease is released, unless it was lost, and Job.Done closes.
//
// # Concurrency model
//
// A job's goroutine owns the work until run returns; its context ends with
// cause ErrCancelled (a cancel), ErrLeaseLost (refused, or not renewed for
// a whole lease: another process may hold it now) or the queue's Close.
// Before it writes the work's end it calls Keep, so that a process that
// paused past its lease never ends work another now runs. New starts
// nothing; Start takes over the pending work and starts three loops
// (renewals, at most 32 at once; cancel reads; scans), one goroutine each;
// Close stops every job and loop and joins them. A Queue is safe for
// concurrent use; its jobs map is guarded by mu.
package jobs
