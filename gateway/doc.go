// Package gateway is turnpike's HTTP front: an Echo server that answers the
// OpenAI-compatible API (chat and text completions proxied to engines; the
// Responses and Conversations API answered from the responses package),
// health, readiness, metrics and the OpenAPI document.
//
// # Overview
//
// Each public request is decoded just enough to learn its model, session
// and output budget, then dispatched: the routing policy picks an endpoint
// of a pool serving the model, the pools client sends it through that
// endpoint's breaker, and the answer is streamed back as it arrives.
// A failure before the engine's first byte is retried on another endpoint;
// nothing is retried once the answer has begun.
//
// # Errors
//
// Handlers return errors of a few classes (this package's sentinels, the
// pools, affinity and turns errors, echo's, and *apierror.Error, which
// admin and responses return); one error handler maps every class onto an
// *apierror.Error and writes it: an OpenAI-shaped body
// {"error":{"message","type","param","code"}} and its status. Once a stream has started, a failure ends the stream with
// an error event instead.
//
// # Concurrency model
//
// A Server is shared by all request goroutines; it holds no per-request
// state. Endpoint state lives in pools (atomics), routing state in the
// policy.
//
// # Request lifecycle and ownership
//
// The handler owns the request until dispatch returns an engine response;
// from then on it owns that response and closes its body exactly once,
// which also releases the endpoint's in-flight count. The policy hears the
// outcome through Done exactly once per endpoint tried.
package gateway
