package responses

import (
	"errors"
	"fmt"
)

// Error classes. Every error the Service returns to a caller wraps one of
// them; the gateway's one error handler maps each class to an HTTP status
// and an OpenAI-shaped body.
var (
	// ErrNotFound: no such response, conversation or item for this tenant.
	// Another tenant's id is not found too.
	ErrNotFound = errors.New("responses: not found")
	// ErrInvalid: the request is malformed or names something it may not.
	ErrInvalid = errors.New("responses: invalid request")
	// ErrConflict: the request is well formed but the object is not in a
	// state that allows it (cancelling a response that is not background).
	ErrConflict = errors.New("responses: conflict")
	// ErrContextLength: the conversation does not fit the model's context
	// window and truncation is disabled.
	ErrContextLength = errors.New("responses: context length exceeded")
	// ErrEngine: the engine refused the request (a 4xx other than length).
	ErrEngine = errors.New("responses: engine refused the request")
	// ErrRateLimited: the service holds as many background responses as
	// Config.MaxQueued (or, for the tenant, MaxQueuedPerTenant) allow;
	// trying again later may succeed. Answered with 429.
	ErrRateLimited = errors.New("responses: too many background responses")
	// ErrClosed: the store or service has been closed.
	ErrClosed = errors.New("responses: closed")
)

// Error is a classified error with the OpenAI param and code a client
// needs to act on it.
type Error struct {
	// Class is one of the Err* sentinels above.
	Class error
	// Param names the offending request parameter, "" if none.
	Param string
	// Code is the OpenAI error code, "" if none.
	Code string
	// Message is the client-facing message.
	Message string
	// Status is the engine's HTTP status for ErrEngine, 0 otherwise.
	Status int
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the class, so errors.Is(err, ErrNotFound) works.
func (e *Error) Unwrap() error { return e.Class }

func invalidf(param, code, format string, args ...any) *Error {
	return &Error{Class: ErrInvalid, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

func notFoundf(param, code, format string, args ...any) *Error {
	return &Error{Class: ErrNotFound, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}
