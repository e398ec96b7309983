// Package admin is turnpike's administrative REST API under /admin/v1:
// tenants and their API keys, quotas, priority bands and the flow-control
// config, pools and endpoints (live load, drain and undrain), and sessions
// (inspect, unpin).
//
// # Overview
//
// A Service holds the tenancy: every tenant and the SHA-256 of every API
// key. New loads it from its namespace of the state store (a
// state.Namespace) and from the config file's tenants, then publishes it
// twice: the key → tenant map to the authenticator the gateway asks (a
// KeyPublisher, *auth.Authenticator) and the tenants to flow control (a
// FlowController).
// Every change made through the API is written to the store first, then
// published, so it takes effect at once and survives a restart. Tenants and keys named in the config file are
// read-only through the API; the file is their source of truth.
//
// Every change also writes a new version key; Refresh reads the tenancy
// again when the version differs from the one this Service last wrote or
// read, so that several gateways sharing one store (Redis) apply each
// other's changes. Start runs it every Deps.RefreshInterval
// (DefaultRefreshInterval for a shared store), and lends the pools lent
// on a schedule as their windows open (ApplyLendSchedules, every second);
// Close stops both loops.
//
// A flowControl saved through the API overrides the file's until it is
// deleted. Drain state is not persisted: a restarted gateway serves from
// every endpoint.
//
// Register mounts the routes on an Echo group whose middleware has already
// checked the admin token. Handlers answer JSON, and every error as an
// OpenAI-shaped body {"error":{"message","type","param","code"}}, written
// here, so the package needs nothing of the gateway.
//
// # Concurrency model
//
// A Service is safe for concurrent use. Writers are serialised by one
// mutex, held across the store write and the publish so that the published
// snapshots are always in the order of the store's writes. Readers of the
// hot path never touch the Service: they read the snapshots it published.
// Pools, endpoints and sessions are read live from their owners. The
// refresh and the scheduled lending run on goroutines of Start's, as any
// writer would.
//
// # Keys
//
// A key is made by auth.NewSecret ("tp-" and 32 random bytes, base64url).
// Only its SHA-256 is kept (auth.HashKey); the secret is shown once, in the
// answer that creates it.
package admin
