// Package budgets charges each tenant's turns to its budgets: requests and
// tokens a minute, tenant-wide and per served model (turns.Quota), kept
// in the state store (state.Namespace.Draw), so that every gateway sharing
// one Redis draws from the same budgets.
//
// # Overview
//
// A Ledger reserves a turn before flow control admits it: one request,
// and its cost in tokens (its prompt counted exactly with the model's
// tokenizer, plus the output it may generate), from every budget of its
// tenant and model at once (state.Namespace.Draw). A turn over a budget
// is refused with a *turns.ShedError (429, quota-rpm or quota-tpm, with a
// Retry-After of when it would fit) inside an *OverBudget that carries
// the budgets' state for the x-ratelimit-* headers. The Reservation a
// turn gets is settled once when the turn ends: on the tokens the engine
// counted, or given back whole when the turn never ran. A turn retried on
// another endpoint or migrated mid-stream is one turn: reserved once.
//
// A budget is counted over a sliding minute (this minute's draws plus the
// last minute's, weighted by how much of it the window still covers), so
// a tenant at its limit gets its budget a minute through and no more; a
// turn dearer than the whole budget waits for an unspent one.
//
// When the store cannot be reached, a turn is let through uncharged and
// the failure counted: a budget is a limit on spending, not on service.
//
// # Concurrency model
//
// A Ledger is safe for concurrent use; it holds no state of its own
// beyond its metrics. The store's Draw is atomic across gateways. A
// Reservation belongs to its turn: Settle is called once.
package budgets
