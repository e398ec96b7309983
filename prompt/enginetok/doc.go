// Package enginetok asks the engine for token ids: vLLM's POST /tokenize,
// which SGLang also serves, with a prompt or with chat messages that the
// engine renders through its own chat template. It is exact by
// construction, for models whose tokenizer or template package hf cannot
// run, at the cost of a round trip per prompt.
//
// # Overview
//
// A Client holds the engine's base URL (without /v1) and the model name.
// Tokenize and TokenizeChat return the ids or an error that wraps
// ErrEngine. Client also implements prompt.Tokenizer, whose methods cannot
// fail: when the engine does not answer in time or answers badly, Encode
// and Count use the Fallback tokenizer (prompt.Approx when nil) and count
// the failure in Failures, so the gateway keeps routing, approximately.
//
// # Concurrency model
//
// A Client is safe for concurrent use once its fields are set; each call
// is one HTTP request bounded by Timeout.
package enginetok
