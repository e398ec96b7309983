package responses

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// TestErrorClasses: each class is its sentinel for errors.Is and leaves
// with the status, type, code and param a client acts on.
func TestErrorClasses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		class error
		want  string // status type code param
	}{
		{"invalid", wire.Invalidf("foo", "unknown_parameter", "Unknown parameter: 'foo'."), ErrInvalid, "400 invalid_request_error unknown_parameter foo"},
		{"not found", convNotFound("conv_1"), ErrNotFound, "404 invalid_request_error not_found "},
		{"conflict", conflictf("previous_response_id", "previous_response_not_ended", "not ended"), ErrConflict,
			"400 invalid_request_error previous_response_not_ended previous_response_id"},
		{"context length", contextLengthf("too long"), ErrContextLength, "400 invalid_request_error context_length_exceeded input"},
		{"rate limited", rateLimitedf("too many"), ErrRateLimited, "429 rate_limit_error rate_limit_exceeded "},
		{"engine length", engineError(&dispatch.EngineError{Status: 400, Message: "This model's maximum context length is 10 tokens."}),
			ErrContextLength, "400 invalid_request_error context_length_exceeded input"},
		{"engine 4xx", engineError(&dispatch.EngineError{Status: 422, Message: "bad tool", Code: "invalid_tool"}), ErrEngine, "422 invalid_request_error invalid_tool "},
		{"engine numeric code", engineError(&dispatch.EngineError{Status: 400, Message: "bad"}), ErrEngine, "400 invalid_request_error bad_request "},
		{"engine 5xx", engineError(&dispatch.EngineError{Status: 500, Message: "boom"}), ErrEngine, "502 server_error upstream_error "},
		{"refused by quota", refusedError(&dispatch.ShedError{Status: 429, Reason: "quota-rpm", RetryAfter: time.Second}), ErrRateLimited, "429 rate_limit_error rate_limit_exceeded "},
		{"refused by overload", refusedError(&dispatch.ShedError{Status: 503, Reason: "saturated", RetryAfter: time.Second}), ErrEngine, "503 server_error server_overloaded "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae *apierror.Error
			if !errors.As(tc.err, &ae) || !errors.Is(tc.err, tc.class) || ae.Message == "" {
				t.Fatalf("%v: not an apierror.Error of class %v with a message", tc.err, tc.class)
			}
			if got := fmt.Sprintf("%d %s %s %s", ae.Status, ae.Type, ae.Code, ae.Param); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
