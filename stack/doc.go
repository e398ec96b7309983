// Package stack is the assembly: it builds one whole gateway from its
// config and runs it, for `turnpike serve`, `turnpike bench` and the
// tests.
//
// # Overview
//
// Config is the config file (Load, Parse: unknown keys refused, every
// problem reported at once; turnpike.example.yaml is loaded by a test),
// each section the config of the package that owns it. New checks a
// config; Start builds each component on those started before it —
// the simulated fleet when Options.Fleet asks for one, the pools'
// registry and KV subscriptions, tracing, the state store, the routing
// records and load shared with other gateways, sessions, flow control,
// dispatch, Responses, batches, admin, and last the HTTP gateway — and
// starts it; Close stops them in the reverse order. That order lives
// here and nowhere else: the gateway stops first and finishes its
// streams while everything under it still runs; the state store closes
// after everything that writes to it.
//
// With Options.Fleet, Start first starts a simulated fleet
// (sim.Topology) and serves its pools (SimPools) instead of the
// config's: the embedded demo fleet, and the benchmarks' backend.
//
// # Concurrency model
//
// New, Start and Close are called once each, in that order, from one
// goroutine. The components run until Close, not until Start's context
// ends, so that a signal can start a graceful Close. The accessors (Addr,
// Registry, Fleet, Pools, Index) may be read once Start has returned.
package stack
