// Package gateway is turnpike's HTTP front: an Echo server that answers the
// OpenAI-compatible API (chat and text completions relayed to engines; the
// Responses and Conversations API, whose routes and WebSocket protocol
// package responses/api registers, as admin and batch register theirs),
// health, readiness, metrics and the OpenAPI document. It holds no routing or flow
// control rules of its own: every engine request is a turn of package
// dispatch.
//
// # Overview
//
// A chat or text completion body is decoded once (the memo's
// ParseChatIn, prompt.ParseCompletion) into what the turn path needs, its
// strings aliasing the body's pooled buffer — model, stream,
// budgets, hints and the prompt as the engine's chat template reads it —
// and forwarded as the client wrote it; only a stream that did not ask for
// usage gets stream_options.include_usage spliced in, and the extra usage
// chunk is kept from the client. The relay reads the engine's stream
// through the turn's one reader and writes each line as it came, flushing
// at every event boundary.
//
// The API packages mount their own routes on the server's groups: admin
// on /admin/v1 behind the admin token, batch and responses/api on /v1
// behind the tenancy middleware. The Responses API reaches the server's
// facilities — the tenant, the checked body read, the model rule's
// header, the request metrics, the error mapping and the shutdown cause —
// through the api.Front the server hands it, not by importing the
// gateway.
//
// # Request bodies
//
// One middleware bounds each body by the body limit (413) and holds it
// against a budget (Options.BodyBudget): a request's stated length is
// taken from it before a byte is read, and given back when its handler
// returns; a request that would pass it is answered 503 with Retry-After
// unread (a body of unknown length is counted as it is read, and fails
// at the read that passes the limit or the budget). A chat, completion or
// Responses body long enough that its length may prove it longer than
// its model's context window is read into a stage outside the Go heap
// (stage.go) and checked there in one scan that decodes nothing
// (prompt.TextBound): if its text alone has more bytes than the window
// has tokens times the most bytes a token holds, it is refused (400
// context_length_exceeded) without ever being decoded, and its memory is
// back with the system at once; otherwise it is copied where its handler
// keeps it. turnpike_request_body_bytes_in_flight, _stage_bytes and
// _refusals_total{reason} show the budget at work.
//
// # Errors
//
// Handlers return errors of a few classes (dispatch's and the pools and
// affinity sentinels, flow control's sheds, engine refusals, the prompt
// parser's field errors, echo's, and *apierror.Error, which admin and
// responses return); one error handler maps every class onto an
// *apierror.Error and writes it: an OpenAI-shaped body
// {"error":{"message","type","param","code"}} and its status. Once a
// stream has started, a failure ends the stream with an error event
// instead; a line the failure cut short is never sent.
//
// # Concurrency model
//
// A Server is shared by all request goroutines; it holds no per-request
// state. New builds it and starts nothing; Start listens on Options.Addr
// and serves from a goroutine of its own, and Close (safe to call from
// another goroutine) drains it.
//
// # Request lifecycle and ownership
//
// The handler owns the request until dispatch.Begin returns a Turn; from
// then on it owns the turn, reads its answer once and ends it exactly
// once, which closes the engine's body and gives routing, flow control and
// the session their outcome.
package gateway
