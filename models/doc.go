// Package models turns the model a client names into the served model that
// answers it: aliases (gpt-4.1 → Qwen/Qwen3-32B) and rewrite rules whose
// matches pick weighted targets, each with its ordered fallbacks.
//
// # Overview
//
// Config is the models: section of the config file. New compiles it into a
// Table, which is immutable. Table.Resolve reads a Request (the model
// named, the tenant, the client's header, the session key) and returns the
// Route: the first matching rule (rules in their order, then the aliases),
// the target its weights picked and that target's fallbacks. A request with
// a session key picks by a hash of the key and the rule, so that every turn
// of a session (a Responses chain, a conversation) lands on the same target
// while the weights hold over many sessions, on every gateway alike; a
// request with none picks at random. Targets are served model names and are
// never resolved again. Resolve does not allocate.
//
// # Concurrency model
//
// A Table is read by every request goroutine and never written after New.
// Its owner (dispatch) publishes it through an atomic.Pointer and replaces
// it whole when the config changes.
//
// # Request lifecycle and ownership
//
// The caller owns the Request. A Route's Fallbacks belong to the Table:
// callers read them and never write them. What to do with a route, sending
// the turn to the target and falling back before the first byte, is the
// dispatcher's.
package models
