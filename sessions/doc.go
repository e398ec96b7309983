// Package sessions names conversations and keeps their routing state.
//
// # Overview
//
// A session is the run of turns of one conversation. Derive names it from
// what the request carries (Inputs), strongest first: a session header
// (x-session-id and the ones agents already send), the Responses
// conversation, the session of the previous_response_id chain, the
// prompt_cache_key, the safety_identifier with a fingerprint of the
// prompt's opening, and last the id of a Responses response that starts a
// chain. Chat completions and Responses share the one derivation; a chat
// completion that carries none is sessionless.
//
// A Store keeps, per tenant and session key, the turns taken, when the
// session was first and last seen, the mean gap between turns, and the pin:
// the endpoint that holds the session's KV prefix and how long that prefix
// is. Memory is bounded: sessions idle for longer than the TTL are
// forgotten, and beyond MaxSessions the least recently seen goes first.
// Pins are written through to a PinStore (KVPinStore over a namespace of
// the durable state store in production, MemPinStore in tests) and
// LoadPins brings them back after a restart, so a restarted gateway routes
// every session where its cache is.
// EndpointLeft drops the pins to an endpoint that left the fleet, at the
// cost of one map copy whatever the number of sessions: each pin is
// dropped when its session is next looked at.
//
// Keys are scoped by tenant: the same key under two tenants names two
// sessions, and nothing in this package lets one tenant read another's.
//
// # Concurrency model
//
// A Store is safe for concurrent use. It is split into shards, each a
// mutex-guarded map with its own LRU list, so that requests of different
// sessions rarely contend. Lookups (Pinned, Get) do not allocate; Touch
// allocates only for a session it has not seen. PinStore calls are made
// outside the shard lock, only when a pin changes.
//
// # Request lifecycle and ownership
//
// The turn path (package dispatch) derives the key (Derive), reads the
// session's state (Get) for flow control, which weighs Turns and MeanGap,
// and calls Touch once the turn is admitted and Finish when it ends, so a
// client retrying after sheds does not look like a fast agent loop. A
// Store's Start brings back the pins (LoadPins) and starts a goroutine
// that forgets expired sessions every minute (Sweep); Close joins it. An
// AsyncPinStore writes pins from its own goroutine, started by Start and
// joined by Close. The affinity policy reads the
// pin (Pinned) on every Pick and moves it (Pin) when the session lands on
// another endpoint, saying why. State values returned to callers are copies;
// the Store owns the entries.
package sessions
