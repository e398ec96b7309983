// Package batch is the OpenAI Files and Batch API on turnpike's fleet: a client uploads a JSONL
// file of requests (POST /v1/files, purpose "batch"), creates a batch of it (POST /v1/batches),
// polls it and downloads its output and error files, as OpenAI's SDKs do.
//
// # Overview
//
// Files live in the store (package state), in 1 MiB chunks under the batch namespace, with the
// tenant that uploaded them; every read checks the tenant, and another tenant's id is a 404. A
// batch is a record in the same namespace; its status moves validating → in_progress →
// finalizing → completed, or ends failed (a refused input file: errors.data names each bad
// line), expired (the window passed; requests not run are batch_expired error lines) or, through
// cancelling, cancelled (batch_cancelled). Each request runs through the turn path
// (dispatch.Begin) as a background turn, whatever its service_tier says, so batches use slack
// capacity. A shed, or an engine's 429, is retried after its wait for as long as the window
// lasts; another failure on the fleet's side (a 5xx, no endpoint) up to MaxRetries times; an
// engine's other 4xx is the request's answer. Each result is stored as it comes, so a batch
// survives a restart; finalizing writes the output file (2xx answers) and the error file (the
// rest) in input order, in one write with the batch's end.
//
// Batches are the work of a jobs.Queue: a batch runs on the one gateway that holds its lease in
// the store (Options.Holder, Lease), the gateway that created it or, at Start and every half
// lease after, any gateway that finds an unfinished batch whose lease is free or ran out (adopt).
// It resumes from the requests that have no result. A cancel asked of another gateway marks the
// batch cancelling in the store, with a cancel request of the queue that its runner reads every
// third of a lease.
//
// The Intake (off unless configured) feeds the same requests from a Redis stream: each entry a
// request with an id, tenant, priority and deadline, each answer an entry of the result stream
// written with the entry's acknowledgement in one transaction. A gateway that stops leaves its
// entries pending for its next start; one that dies, for another to claim after ClaimIdle.
//
// # Concurrency model
//
// A running batch has its job's goroutine, which owns the record (handlers read it through
// snapshot and cancel through requestCancel; every write takes the job's lock); the queue renews
// the leases every third of one. A renewal refused, or failing for a whole lease, stops the batch
// here without ending it. The Intake's requests in flight are jobs of a queue of their own,
// without leases (the stream's consumer group is theirs). At most Concurrency requests run at
// once across batches and the Intake. New starts nothing; Start claims stored batches and starts
// the queue's loops; Close stops every job, waits for them and releases their leases, leaving
// requests in flight to run again wherever the batch is taken up next.
package batch
