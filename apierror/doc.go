// Package apierror is turnpike's one OpenAI-shaped error: the body
// {"error":{"message","type","param","code"}} a client reads, the HTTP
// status it is sent with, the extra headers that tell the client when to
// try again (Retry-After, x-turnpike-dropped-reason), and the class it
// belongs to.
//
// # Overview
//
// Every HTTP-facing package (gateway, admin, responses) returns an *Error
// where it knows what the client should be told, built with the
// constructor of its shape: Invalid (400, naming the parameter), NotFound,
// Conflict, RateLimited, Unavailable, Internal, or New for any other
// status. Type follows from the status (TypeFor) unless set; Param and
// Code are strings, and empty means null on the wire, so a client never
// sees a numeric code. An engine's own refusal (read once, by the turn
// path) is put in the same shape by the gateway, keeping its message.
//
// An *Error unwraps to its Class, a package's sentinel, so
// errors.Is(err, responses.ErrNotFound) holds for the error that answers
// it. The gateway's one error handler writes an *Error with Write; errors
// of other kinds it maps onto one first.
//
// # Concurrency model
//
// An *Error is a value built once and then only read: the With methods
// modify the receiver and are for building it, before it is returned.
// Write and Body may be called from any goroutine.
//
// The package imports nothing of turnpike's: it is a leaf under every
// package that answers HTTP.
package apierror
