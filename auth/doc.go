// Package auth is who may call turnpike: tenants' API keys and their
// hashes, the bearer-token lookup that names a request's tenant, and the
// check of the admin API's token.
//
// # Overview
//
// A key is KeyPrefix and 32 random bytes, base64url (NewSecret). Only its
// SHA-256, a KeyHash, is kept anywhere; the config file names a key by
// "sha256:<hex>" (KeyHash.String, ParseKeyHash). The admin API owns the
// tenancy and publishes the hash → tenant map into an Authenticator with
// SetKeys after every change; the gateway's middleware asks Authenticate
// for each public request's tenant and IsAdmin for each admin request.
// With no tenants at all the gateway runs open: every request is
// DefaultTenant and no key is asked for.
//
// # Concurrency model
//
// An Authenticator is safe for concurrent use. The key map is an immutable
// snapshot behind an atomic.Pointer: SetKeys swaps in a new one, and
// Authenticate, on every request's path, reads it without a lock and
// without allocating. The admin token's hash is fixed by New.
//
// The package imports nothing of turnpike's, and no HTTP framework: the
// middleware that answers 401 lives with the server.
package auth
