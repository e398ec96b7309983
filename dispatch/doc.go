// Package dispatch owns one turn from admission to outcome: every engine
// request the gateway makes, for a chat or text completion relayed as is
// or for a Responses turn, takes this one path.
//
// # Overview
//
// A caller describes a turn in a Spec (tenant, model, the engine request,
// session and priority hints, the prompt) and calls Dispatcher.Begin,
// which, in this order: derives the session (sessions.Derive) and reads its
// state; asks flow control (turns) to admit the turn, classifying its raw
// hints against the tenant's bands; counts the prompt's tokens once and,
// for policies that score by prefix, hashes its KV-cache blocks (kv); picks
// an endpoint (affinity) and sends the request (pools), retrying on another
// endpoint while no byte of the answer has arrived. An engine that refuses
// the request (a 4xx) ends the turn there with an *EngineError.
//
// For a model that prefill and decode pools serve (pools' roles), Begin
// disaggregates (pd.go): it picks the decoder, asks affinity's P/D
// decider whether the prompt's tokens not cached there are worth a
// prefill leg, sends that leg to a prefiller shaped as vLLM's proxy does,
// then the decode leg with the kv_transfer_params the prefiller answered;
// for SGLang pools both legs at once, with bootstrap fields
// (pd_sglang.go), the prefill leg's answer drained by its own goroutine.
// A failed prefill falls back to a local prefill on the decoder; the Turn
// is the decode leg's, and reports the prefiller's cached tokens.
//
// A caller that wants its turns kept on one endpoint (a Responses
// WebSocket connection) puts a *Affinity in the turns' context
// (WithAffinity): each is offered to that endpoint alone first, through
// the policy, and the endpoint that serves it is the one preferred next.
//
// # Request lifecycle and ownership
//
// Begin returns a *Turn that owns the engine's response. Its caller reads
// the answer through the turn, once: Next yields the lines of a streamed
// answer (the chat relay writes them out byte for byte; the Responses
// translator decodes their data) and ReadAll a whole one; either notes the
// first data and the usage block on the way. The caller then calls End
// exactly once with how the turn ended. End closes the engine's body and
// gives the outcome to routing (cached tokens, time to first token, the
// KV index record), releases the flow-control ticket with the tokens the
// engine counted, and ends the session's turn. On an error from Begin,
// everything taken has already been given back.
//
// # Concurrency model
//
// A Dispatcher is safe for concurrent use and holds no goroutines of its
// own. A Turn belongs to one goroutine at a time: whoever holds it.
package dispatch
