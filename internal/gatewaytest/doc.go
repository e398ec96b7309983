// Package gatewaytest is the test fixture that the gateway's tests and
// the Responses API's (responses/api) share: a gateway with the Responses
// API over simulated engines whose chat bodies are recorded, an OpenAI
// SDK client for it, and the helpers that read its errors and its
// WebSocket events. Only tests import it.
//
// # Overview
//
// NewOnWith builds the parts — simulated engines behind Recorders, a
// pool registry, a dispatcher, a Responses service on a Pebble store in
// the test's temporary directory — and hands them to a Mount, which
// builds the gateway in front of them: the package imports nothing of
// the gateway, so that the gateway's own tests can use it. NewStack and
// its variants are NewOnWith with simulated engines.
//
// # How data enters and leaves
//
// A test sends requests through Stack.Client or to Stack.Front; the
// bodies the engines received are read back from Stack.Engine (and
// Engines). Everything built is closed by the test's cleanups.
//
// # Concurrency model
//
// A Recorder is served from many goroutines; its Bodies are guarded by
// Mu (Count, Last and Sent take it). A Stack is used by its test's
// goroutines; its parts are safe for concurrent use.
package gatewaytest
