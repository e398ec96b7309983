package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/turns"
)

// TestErrorClasses: every class of error a handler may return leaves with
// the right status, type and code, and the headers a client acts on.
func TestErrorClasses(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("somewhere: %w", err) }
	for _, tc := range []struct {
		name   string
		err    error
		status int
		typ    string
		code   string
		param  string
		header map[string]string
	}{
		{name: "api error as it is", err: wrap(apierror.Invalid("stream", "invalid_type", "bad")), status: 400, typ: "invalid_request_error", code: "invalid_type", param: "stream"},
		{name: "model not found", err: wrap(dispatch.ErrModelNotFound), status: 404, typ: "invalid_request_error", code: "model_not_found", param: "model"},
		{name: "no endpoint", err: wrap(dispatch.ErrNoEndpoint), status: 503, typ: "server_error", code: "no_healthy_endpoint", header: map[string]string{"Retry-After": "1"}},
		{name: "engine refusal", err: wrap(&dispatch.EngineError{Status: 400, Message: "This model's maximum context length is 8192 tokens."}), status: 400, typ: "invalid_request_error", code: "context_length_exceeded"},
		{name: "engine refusal with its code", err: wrap(&dispatch.EngineError{Status: 422, Message: "bad tool", Code: "invalid_tool", Param: "tools"}), status: 422, typ: "invalid_request_error", code: "invalid_tool", param: "tools"},
		{name: "engine refusal without a code", err: wrap(&dispatch.EngineError{Status: 404, Message: "no such adapter"}), status: 404, typ: "invalid_request_error", code: "not_found"},
		{name: "engine rate limit", err: wrap(&dispatch.EngineError{Status: 429, Message: "slow down"}), status: 429, typ: "rate_limit_error", code: "rate_limit_exceeded"},
		{name: "request field error", err: wrap(&prompt.FieldError{Param: "messages", Code: "empty_array", Message: "empty"}), status: 400, typ: "invalid_request_error", code: "empty_array", param: "messages"},
		{name: "affinity no endpoint", err: wrap(affinity.ErrNoEndpoint), status: 503, typ: "server_error", code: "no_healthy_endpoint"},
		{name: "breaker open", err: wrap(pools.ErrBreakerOpen), status: 503, typ: "server_error", code: "no_healthy_endpoint"},
		{name: "upstream status", err: wrap(&pools.UpstreamError{StatusCode: 500}), status: 502, typ: "server_error", code: "upstream_error"},
		{name: "upstream unreachable", err: wrap(pools.ErrUpstream), status: 502, typ: "server_error", code: "upstream_error"},
		{name: "client gone", err: wrap(context.Canceled), status: statusClientClosedRequest, typ: "invalid_request_error", code: "client_closed_request"},
		{name: "deadline", err: wrap(context.DeadlineExceeded), status: 504, typ: "server_error", code: "timeout"},
		{name: "shed by quota", err: wrap(&turns.ShedError{Status: 429, Reason: turns.ReasonQuotaRPM, RetryAfter: 1500 * time.Millisecond}),
			status: 429, typ: "rate_limit_error", code: "rate_limit_exceeded", header: map[string]string{"Retry-After": "2", "X-Turnpike-Dropped-Reason": turns.ReasonQuotaRPM}},
		{name: "shed by overload", err: wrap(&turns.ShedError{Status: 503, Reason: turns.ReasonSaturated}),
			status: 503, typ: "server_error", code: "server_overloaded", header: map[string]string{"Retry-After": "1", "X-Turnpike-Dropped-Reason": turns.ReasonSaturated}},
		{name: "shed by ttl", err: wrap(&turns.ShedError{Status: 408, Reason: turns.ReasonTTLExpired}),
			status: 408, typ: "server_error", code: "queue_timeout", header: map[string]string{"X-Turnpike-Dropped-Reason": turns.ReasonTTLExpired}},
		{name: "responses not found", err: wrap(responses.ErrNotFound), status: 404, typ: "invalid_request_error", code: "not_found"},
		{name: "responses closed", err: wrap(responses.ErrClosed), status: 503, typ: "server_error", code: "unavailable"},
		{name: "body too large", err: echo.ErrStatusRequestEntityTooLarge, status: 413, typ: "invalid_request_error", code: "request_too_large"},
		{name: "no route", err: echo.ErrNotFound, status: 404, typ: "invalid_request_error", code: "not_found"},
		{name: "no method", err: echo.ErrMethodNotAllowed, status: 405, typ: "invalid_request_error", code: "method_not_allowed"},
		{name: "echo 401", err: echo.ErrUnauthorized, status: 401, typ: "invalid_request_error", code: "invalid_api_key"},
		{name: "echo 500", err: echo.ErrInternalServerError, status: 500, typ: "server_error"},
		{name: "anything else", err: errors.New("disk on fire"), status: 500, typ: "server_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae := toAPIError(tc.err)
			if ae.Status != tc.status || ae.Type != tc.typ || ae.Code != tc.code || ae.Param != tc.param {
				t.Errorf("got %d %s code %q param %q, want %d %s %q %q", ae.Status, ae.Type, ae.Code, ae.Param, tc.status, tc.typ, tc.code, tc.param)
			}
			if ae.Message == "" {
				t.Error("no message")
			}
			for k, v := range tc.header {
				if got := ae.Header.Get(k); got != v {
					t.Errorf("header %s %q, want %q", k, got, v)
				}
			}
			if tc.name == "anything else" && ae.Message != "Internal error." {
				t.Errorf("an unknown error tells the client its cause: %q", ae.Message)
			}
		})
	}
}
