// Package stack is the assembly: it builds one whole gateway from its
// config and runs it, for `turnpike serve`, `turnpike bench` and the
// tests.
//
// # Overview
//
// Config is the config file (Load, Parse: unknown keys refused, every
// problem reported at once; turnpike.example.yaml is loaded by a test).
// Each section is the config of the package that owns it, with that
// package's defaults and checks; the assembly adds only what spans
// packages (routing's shareRecords and shareLoad, bodyBudget, the Go
// runtime's collector).
//
// New checks a config and keeps a copy; Start builds each component on
// those started before it and starts it, in phases: the simulated fleet
// when Options.Fleet asks for one (its pools, SimPools, replace the
// config's), the fleet view (pools, the KV-cache index and its KV event
// subscriptions), state (tracing, the state store, routing records shared
// with other gateways, the session pin writer and sessions), the turn
// path (routing, load shared, flow control, dispatch), and the APIs
// (Responses, batches and the intake, admin, and last the HTTP gateway).
// Close stops them in the reverse order: the gateway stops first and
// finishes its streams while everything under it still runs; the KV
// subscriptions end before the engines they follow; the state store
// closes after everything that writes to it. That order lives here and
// nowhere else. Every component has the one life cycle (New, Start(ctx)
// error, Close(ctx) error), which lifecycle.go holds them to.
//
// Group runs several gateways on one Redis behind a round-robin front
// (RoundRobin), as a Kubernetes Service spreads requests over replicas.
//
// # Concurrency model
//
// New, Start and Close are called once each, in that order, from one
// goroutine. The components run until Close, not until Start's context
// ends, so that a signal can start a graceful Close. The accessors (Addr,
// Pools, Fleet, Registry, Index, Served) may be read once Start has
// returned.
package stack
