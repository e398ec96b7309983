// Package batch is the OpenAI Files and Batch API on turnpike's fleet:
// a client uploads a JSONL file of requests (POST /v1/files, purpose
// "batch"), creates a batch of it (POST /v1/batches), polls it, and
// downloads the output and error files, as OpenAI's SDKs do.
//
// # Overview
//
// Files live in the store (package state), cut into 1 MiB chunks under the
// batch namespace, with the tenant that uploaded them; every read checks
// the tenant, and another tenant's id is a 404. A batch is a record in the
// same namespace; its status moves validating → in_progress → finalizing
// → completed, or ends failed (its input file was refused: errors.data
// names each bad line), expired (the completion window passed; requests
// not run are error lines with code batch_expired) or, through
// cancelling, cancelled (batch_cancelled). Each request runs through the
// turn path (dispatch.Begin) as a background turn, whatever its own
// service_tier says: flow control (turns) admits it only below the pool's
// hold point and queues and sheds the background band before any other,
// so batches use slack capacity. A shed is retried after its Retry-After
// (at least the backoff) for as long as the batch's window lasts; a
// failure on the fleet's side (an engine's 5xx, no endpoint) up to
// MaxRetries times; an engine's 4xx is the request's answer. Each result
// is stored as it comes, with the batch's request counts, so a batch
// survives a restart: Start resumes every unfinished batch from the
// requests that have no result. Finalizing writes the output file (2xx
// answers) and the error file (the rest) in input order, in one write
// with the batch's end.
//
// The Intake (intake.go, off unless configured) feeds the same runner
// from a Redis stream: each entry a request with an id, a tenant, a
// priority and a deadline, each answer an entry of the result stream
// under that id with a code (completed, deadline_exceeded, cancelled,
// refused, engine_error, invalid_request). Entries are acknowledged with
// their result, in one transaction, so a gateway that stops leaves its
// requests pending for the next start, and one that dies leaves them for
// another gateway to claim.
//
// # Concurrency model
//
// A Service runs one goroutine per unfinished batch (its job), and at
// most Concurrency request goroutines across batches. The job owns its
// batch's record: handlers read it through the job (snapshot) and cancel
// through it (requestCancel), and every write of the record takes the
// job's lock. A batch that no job of this process runs is read from the
// store. New starts nothing; Start resumes stored batches and lets
// handlers start new ones; Close stops every job and waits for them,
// leaving the requests in flight to run again at the next Start.
//
// One gateway runs a batch: several gateways sharing a Redis store each
// resume the unfinished batches they find at Start, so run batches on
// one of them.
package batch
