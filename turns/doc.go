// Package turns is flow control: it decides when each turn may go to its
// pool, so that bursty agent loops cannot starve people waiting on an answer.
//
// # Overview
//
// A Turn carries its request's raw Hints (the x-turnpike-priority header,
// service_tier, background); Controller.Acquire classifies them once
// (Classify) into a Band (Interactive, Standard, Background) against the
// tenant's default and maximum bands. Acquire then admits it or sheds it with a *ShedError (the
// concurrency quota, the shed curve, queue caps; a tenant's budgets a minute
// are the budgets package's, charged before Acquire), queues it, and dispatches it when the pool has a
// free slot and room for the turn's band. Room is per band: Standard and
// Background turns see each endpoint's capacity less what it keeps for
// Interactive turns (InteractiveReservedPerEndpoint sequences,
// InteractiveReservedTokensPerEndpoint tokens, an engine queue below
// LowerBandQueueDepth, and the routing policy's interactive Lane while it
// is held), and while no endpoint has room for them Background turns past
// HeldPerEndpoint are shed at once (docs/flow-control.md). A pool with no available endpoint queues
// its turns too, until an endpoint is back or their band's TTL passes. Each endpoint gives the
// pool MaxInFlightPerEndpoint slots, InteractiveReservedPerEndpoint of them
// reserved: Standard and Background turns take only the shared slots, and
// only below HoldAt, so an agent backlog waits in turnpike's queues, not in
// the engines' first-come queues; Interactive turns also take the reserve,
// even in a held pool, so a person's turn starts on the next free slot
// instead of behind the backlog; the shed curve never sheds them. Bands
// are served in strict order with a small guaranteed share for the lower
// ones; within a band,
// tenants share by weighted fair queuing on tokens, sessions within a tenant
// share equally, and Score (warm KV first, human pace before long fast
// agent loops, short prefills before long ones, aging) buys a session a
// bounded head start. Saturation comes
// from the pools' scraped metrics through the Capacity interface;
// PoolCapacity reads a *pools.Pool. Data leaves as Tickets, ShedErrors and
// Prometheus metrics.
//
// # Concurrency model
//
// One Controller serves all request goroutines. Its configuration and
// tenants are immutable snapshots behind atomic.Pointer (SetConfig,
// SetTenants copy and swap). Queues, quotas and counters sit behind one
// mutex, held only for O(log n) heap work; capacity is measured outside it.
// A queued turn's goroutine sleeps on its own buffered channel; nobody
// polls. The channel is signalled by whoever frees capacity: Release, a
// later Acquire, or the Controller's one ticker goroutine, which re-measures
// every pool each TickInterval (fresh metrics, TTL expiry). New starts
// nothing; Start starts the ticker and Close joins it.
//
// # Request lifecycle and ownership
//
// The turn path (package dispatch) calls Acquire with a Turn it keeps owning (Acquire copies
// it). Acquire returns either an error and the zero Ticket — the turn ends
// there, with nothing to release — or a Ticket, which the caller then owns
// and must Release exactly once when the engine request has ended, however
// it ended, with the actual token count if known. A second Release panics.
// If the context ends while the turn is queued, Acquire removes it and
// returns the context's error; if it ends just as the turn is dispatched,
// Acquire releases the ticket itself. Close sheds every queued turn.
package turns
