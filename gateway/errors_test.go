package gateway

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/turns"
)

// TestErrorClasses: every class of error a handler may return leaves with
// the right status, type and code, and the headers a client acts on. The
// turn path's errors are dispatch.APIError's (its table test has each);
// one of them here shows the handler uses it.
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
		{name: "client gone", err: wrap(context.Canceled), status: statusClientClosedRequest, typ: "invalid_request_error", code: "client_closed_request"},
		{name: "deadline", err: wrap(context.DeadlineExceeded), status: 504, typ: "server_error", code: "timeout"},
		{name: "shed by overload", err: wrap(&turns.ShedError{Status: 503, Reason: turns.ReasonSaturated}),
			status: 503, typ: "server_error", code: "server_overloaded", header: map[string]string{"Retry-After": "1", "X-Turnpike-Dropped-Reason": turns.ReasonSaturated}},
		{name: "responses not found", err: wrap(responses.ErrNotFound), status: 404, typ: "invalid_request_error", code: "not_found"},
		{name: "store unavailable", err: wrap(fmt.Errorf("%w: dial tcp: connection refused", state.ErrUnavailable)), status: 503, typ: "server_error", code: "store_unavailable", header: map[string]string{"Retry-After": "1"}},
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
