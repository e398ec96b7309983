// Package api is the HTTP face of package responses: the Responses and
// Conversations routes and the Responses WebSocket protocol. The gateway
// mounts it on its /v1 group (Register), as it mounts admin's and batch's
// routes; the API calls down into a *responses.Service and imports
// nothing of the gateway.
//
// # Overview
//
// Each handler reads its request (path, query, body), calls one method of
// the Service and writes its answer: JSON, or, for a streamed response,
// server-sent events flushed at every event (or, while the service holds
// them, every burst). A Responses body is read through the gateway's
// Front.ReadChecked, which refuses one longer than its model's context
// before it is decoded; it is decoded once, strictly (package wire).
//
// GET /v1/responses upgraded is a WebSocket connection: each
// response.create message makes a response whose events come back as
// text messages, in order; a bad message is an error event and the
// connection stays open. The connection keeps its last response's
// context for store:false chaining and a pending generate:false warmup,
// and carries a dispatch.Affinity in its turns' context so that they keep
// to the replica its first turn went to.
//
// # How data enters and leaves
//
// Requests enter through the routes Register mounts; the tenant is the
// one the gateway's middleware named (Front.Tenant). Errors are returned
// to the gateway's error handler, which writes them in the OpenAI shape;
// on a WebSocket connection they are sent as error events, mapped by
// Front.Error. Requests are counted through Front.Observe; the WebSocket
// connections have their own collectors (turnpike_websocket_*),
// registered on Options.Metrics.
//
// # Concurrency model
//
// An API is shared by all request goroutines and holds no per-request
// state; Register is called once, before the server serves. A WebSocket
// connection has two goroutines: a reader that hands each message over
// and cancels the turn in flight when the client goes away, and the
// handler's, which answers messages one after another. Events are written
// under a context that outlives the turn, so that a turn ended by the
// connection limit (Options.WebSocketLimit) or a shutdown
// (Front.ShuttingDown) still sends its final event.
package api
