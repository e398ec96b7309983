// Package tracing owns turnpike's OpenTelemetry traces: the exporter and
// tracer provider built from the tracing config, the GenAI attribute names
// the turn span carries, and a Tracer that the turn path calls.
//
// # Overview
//
// Tracing is off unless an OTLP endpoint is configured (the config's
// endpoint or OTEL_EXPORTER_OTLP_ENDPOINT). Off, the Tracer is nil and
// every method is a no-op that allocates nothing, so the hot path pays a
// nil check per span. On, spans go to an OTLP/HTTP exporter through a
// batching span processor, sampled parent-based by trace-id ratio.
//
// # Data in and out
//
// Trace context enters from clients (Extract reads traceparent and
// tracestate off the request header) and leaves to engines (Inject writes
// them onto the engine request header), in W3C Trace Context format.
//
// # Concurrency model
//
// A Tracer is immutable and safe for concurrent use. New builds the
// provider without starting anything that must be joined besides the
// batch processor, which Close flushes and stops.
package tracing
