package responses

import (
	"errors"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// Error classes. Every error the Service returns to a caller is an
// *apierror.Error of one of them, with the status, param and code a client
// needs to act on it, or (from the store) the bare ErrNotFound or
// ErrClosed, which the gateway's one error handler maps itself.
var (
	// ErrNotFound: no such response, conversation or item for this tenant.
	// Another tenant's id is not found too.
	ErrNotFound = errors.New("responses: not found")
	// ErrInvalid: the request is malformed or names something it may not;
	// the strict decoders of wire answer with it.
	ErrInvalid = wire.ErrInvalid
	// ErrConflict: the request is well formed but the object is not in a
	// state that allows it (cancelling a response that is not background).
	ErrConflict = errors.New("responses: conflict")
	// ErrContextLength: the conversation does not fit the model's context
	// window and truncation is disabled.
	ErrContextLength = errors.New("responses: context length exceeded")
	// ErrEngine: the engine refused the request (a 4xx other than length,
	// sent with the engine's status), or refused a background response
	// until it gave up (503).
	ErrEngine = errors.New("responses: engine refused the request")
	// ErrRateLimited: the service holds as many background responses as
	// Config.MaxQueued (or, for the tenant, MaxQueuedPerTenant) allow;
	// trying again later may succeed. Answered with 429.
	ErrRateLimited = errors.New("responses: too many background responses")
	// ErrClosed: the store or service has been closed.
	ErrClosed = errors.New("responses: closed")
)

func notFoundf(param, code, format string, args ...any) *apierror.Error {
	return apierror.NotFound(param, code, format, args...).WithClass(ErrNotFound)
}

// conflictf is a 400, as OpenAI answers a request its object's state does
// not allow, not a 409.
func conflictf(param, code, format string, args ...any) *apierror.Error {
	return apierror.Invalid(param, code, format, args...).WithClass(ErrConflict)
}

// modelNotFound is the 404 for a model no pool serves, as dispatch.APIError
// words it for every API.
func modelNotFound(model string) *apierror.Error {
	ae, _ := dispatch.APIError(dispatch.ModelNotFound(model))
	return ae.WithClass(ErrNotFound)
}

// contextLengthf is the 400 of a conversation too long for the model.
func contextLengthf(format string, args ...any) *apierror.Error {
	return apierror.Invalid("input", "context_length_exceeded", format, args...).WithClass(ErrContextLength)
}

func rateLimitedf(format string, args ...any) *apierror.Error {
	return apierror.RateLimited("rate_limit_exceeded", format, args...).WithClass(ErrRateLimited)
}
