// Package pools owns the fleet as turnpike sees it: pools of engine
// endpoints from the config, each endpoint's live load (scraped engine
// metrics, the in-flight counts of this gateway and, through a LoadShare,
// of the others on the fleet), active health checks, a
// circuit breaker per endpoint, and the engine client that sends requests
// through that breaker.
//
// # Overview
//
// A Registry holds Pools; a Pool holds Endpoints that serve the same models
// on the same accelerator and model profile. Routing code (affinity, turns)
// reads an Endpoint's state through its methods; only this package writes it.
//
// Each pool's endpoints come from one discovery Source, which upserts and
// deletes them, each with Labels (pool, role, revision, models,
// accelerator): static (the config's list), file (FileSource: an endpoints
// file watched through its directory, so that a rename over it and a
// ConfigMap's symlink swap are both seen) or kubernetes (KubernetesSource:
// the Ready pods of an InferencePool or a label selector, through
// client-go informers). An endpoint that joins a running fleet takes
// traffic after its first good scrape; one that leaves is out of every
// snapshot at once, drains its in-flight requests, and then the OnLeave
// hooks forget it (the KV index) and its Index is free for another.
// An endpoint turns unhealthy after Options.HealthFailures consecutive
// failed /health probes, or at once when its connection is refused, and
// healthy again after one passing probe. A breaker that has been open for
// Options.BreakerOpenFor goes half-open and lets one trial request through;
// WantsTrial tells routing to send it one, so a recovered replica rejoins.
// A pool may serve LoRA adapters of its model (PoolConfig.Adapters, and
// those its engines list in /v1/models with a parent): each scrape of
// such an engine reads its adapters, and an Endpoint tells routing which
// it holds (HasAdapter) and how many slots are taken (AdapterSlots);
// Registry.EnsureAdapter, called by dispatch before a send, loads an
// adapter on demand (one load at a time per endpoint, requests for the
// same adapter waiting on it) or notes it as routed there.
// ValidatePools and Options.Validate report each problem of the config as
// a FieldError, the shape turns and affinity report theirs in too.
//
// # Concurrency model
//
// Every Endpoint field read on the request path is either immutable after
// New or an atomic: the scraped Load is published as an immutable snapshot
// through atomic.Pointer, counters are typed atomics. The endpoint set is
// an immutable snapshot too (Registry.Endpoints, EndpointsFor, Pool.Endpoints),
// rebuilt under the registry's lock and swapped whole on every change. The
// scraper and the health checker each run one goroutine per endpoint, from
// Registry.Start or its joining until it leaves or Registry.Close; each
// source runs its own watch goroutine, joined by Close.
//
// # Request lifecycle and ownership
//
// Client.Send sends one request to one endpoint. The caller owns the
// returned *http.Response and must close its body; the endpoint's in-flight
// count, and the request's deadline (Options.RequestTimeout, stream
// included), are held until then. A 5xx, a connection error or a timeout
// before the answer's headers counts against the endpoint's breaker; a 4xx
// is the client's fault and never does, nor does a client going away.
//
// The client speaks HTTP/1.1 to plain http:// engines itself (h1Transport):
// the caller's goroutine writes the request's head and body in one writev
// and reads the answer, a kept-alive connection going back to the idle
// list once its answer has been read to the end and closed; an https engine
// goes through net/http's Transport.
package pools
