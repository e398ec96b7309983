// Package responses answers the OpenAI Responses and Conversations API and
// keeps their state: responses, conversation items, background jobs and
// their stream events. Engines keep none of it, so any gateway replica can
// serve any turn.
//
// # Overview
//
// Package responses/api (its HTTP handlers and WebSocket protocol, which
// the gateway mounts) decodes a request with wire.DecodeCreateRequest (package
// wire holds the API's JSON types and strict decoders: an unknown
// parameter or a wrong type is an *apierror.Error naming it) and hands it
// to Service.Create. Every field of OpenAI's request is accepted, with
// client_metadata, which the Codex CLI sends; those an engine has no use
// for (context_management, prompt_cache_options, moderation, prompt, …)
// are checked and left out of the engine request (wire/options.go), some
// echoed on the response. Tools (wire/tools.go): function tools go to the
// engine; a namespace tool's functions are flattened into the engine's
// one list as <namespace>__<name> and the engine's calls to them mapped
// back to the name and namespace OpenAI returns; hosted tools (web_search,
// file_search, …), which only OpenAI runs, never reach the engine, and
// Config.HostedTools drops them (counted, logged at debug) or refuses the
// request. mcp tools are run by the service itself (mcp.go, over the
// client in responses/mcpclient): listed, offered to the engine, called
// inside the response, the engine asked again with the results; custom
// tools are functions of one string for the engine. The service rebuilds the turn's context from the
// StateStore (the previous_response_id chain or the conversation), fits it to
// the model's window (counting tokens with the turn path's tokenizer; the
// rendered prompt's count is the turn's, used again by admission and
// routing), renders it as a chat completion and sends it down the turn
// path (Engine, which *dispatch.Dispatcher is). The engine's stream, read
// through the turn's one reader, becomes Responses events (run.go) and the
// response object; the ended response is stored, and only then announced.
//
// A reasoning engine's thinking (vLLM's reasoning_content delta) becomes
// a reasoning item: a summary with summary events when reasoning.summary
// is set, reasoning text otherwise. With include
// ["reasoning.encrypted_content"] the item carries the thinking sealed
// (seal.go: AES-256-GCM, bound to the tenant and the kind of item, with a
// key id); a stateless client (store:false, full input each turn, its own
// item ids) sends the item back and the engine sees the thinking again as
// the assistant turn's reasoning_content. A blob that does not open is a
// 400 (invalid_encrypted_content) before anything reaches the engine.
//
// # Key layout and encoding
//
// StateStore keeps everything in one namespace of the state store (cmd
// mounts it at "rs/", so on disk every key below starts with it). Values
// are JSON but for items, which have a compact binary form (codec.go).
// seq is a big-endian uint32, at an 8-byte big-endian Unix second.
// testdata/layout is the specification: the keys each operation writes
// and removes, and what a read returns.
//
//	r/<resp_id>              Record: tenant, expiry, the response, its context manifest
//	i/<chain>/<seq>          Item: the items of a chain, in order
//	h/<chain>                head: tenant, next seq, expiry (and the conversation object)
//	x/<tenant>/<item_id>     locator: tenant, chain, seq (item_reference, paging cursors)
//	e/<resp_id>/<seq>        a background response's stream event, for resume
//	q/<resp_id>              a background response that has not ended (empty value)
//	c/<resp_id>              a cancel requested for it, for the gateway that runs it (empty value)
//	l/<resp_id>              the lease of the gateway that runs it (a state lease, not a key)
//	t/<at><kind><id>         retention index: kind 'r' response, 'h' chain
//	k/<name>                 a secret: "seal", the key of encrypted content (seal.go)
//
// A chain is an append-only run of items named after the response that
// started it (or the conversation). A response stores only its own items
// (input, then output), once, at the end of its parent's chain, and a
// manifest: its whole context as segments [from, to) of chains. A linear
// chain of any length is one segment, so a turn's context is one range
// scan, with no record read per ancestor. A fork (a second child of one
// response) starts a chain of its own and adds one segment. Deleting a
// response leaves its items to the responses that continue it; retention
// collects a chain when the TTL of the last response to extend or read it
// has passed. Item ids may be the client's own, so locators are per
// tenant: reusing an id moves only the tenant's own locator.
//
// A response's input items (GET /v1/responses/{id}/input_items) are what
// its model saw: its manifest up to the end of its own input, read as one
// list and compacted as the turn was (testdata/input_items). A page is
// range scans from its cursor, which a locator places in the manifest;
// a compaction item, which no key marks, is looked for by type alone.
//
// # Concurrency model
//
// The store takes no global lock: every write is one batch, applied
// synced when a client is about to see its effect (stream events go
// unsynced; the synced batch that ends the response carries them), and
// the state store shares one WAL sync among concurrent batches. Writes
// that read a chain's head (appends) hold a striped lock on the chain id.
// The state store owns the database: closing it waits for the operations
// in flight, and later ones answer ErrClosed. Service methods are safe
// for concurrent use. Background
// responses run on their own goroutines, at most Config.Workers at once;
// a job's in-memory event list is guarded by its mutex and readers wait on
// a channel replaced at every event.
//
// # Request lifecycle and ownership
//
// A foreground response is owned by the request's goroutine from
// Create to endTurn; a client disconnect cancels the engine request and
// the response ends cancelled. A background response is first admitted
// against Config.MaxQueued and MaxQueuedPerTenant, counting the other
// gateways' responses when a HeldExchange runs (else Create answers
// ErrRateLimited and stores nothing), then stored queued (synced) before
// Create returns; from then its job goroutine owns it until endTurn, and
// Cancel or Delete only ask it to stop and wait. When the engine refuses
// a job's turn with "try again later" (a *dispatch.ShedError), the job
// gives up its worker slot, waits (jobs.Retry) and tries again, for at most
// Config.RetryRefusedFor, then fails with rate_limit_exceeded or
// server_overloaded. A response ends exactly once, in endTurn: final
// record, items and (for a background response) the terminal event in
// one synced batch; only then is the end announced. Close leaves running
// or waiting background responses pending (q/); the next Start re-runs
// each, or fails it with a clear error once it has been started
// Config.MaxAttempts times.
//
// # Several gateways on one store
//
// Background responses are the work of a jobs.Queue (lease.go): a
// pending one is run only by the gateway holding its claim (l/, a state
// lease), claimed before it is stored, renewed every third of
// Config.JobLease, checked once more before the end is written, given up
// at the end or at Close; every half JobLease each gateway claims and runs
// (adopt) the pending responses whose claim ran out. A cancel or delete
// through a gateway that does not run the response writes c/, which the
// running gateway reads every Config.JobPoll; a stream through such a
// gateway follows the stored events (followStored).
package responses
