package dispatch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/turns"
)

// TestAPIError: every kind of error of the turn path leaves with one
// status, type, code and param, and the headers a client acts on,
// whichever API carried the turn (issue 32, item 7: a shed was
// server_overloaded on chat and rate_limit_exceeded in a batch line).
func TestAPIError(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("somewhere: %w", err) }
	for _, tc := range []struct {
		name   string
		err    error
		status int
		typ    string
		code   string
		param  string
		msg    string
		header map[string]string
	}{
		{name: "shed by quota", err: wrap(&turns.ShedError{Status: 429, Reason: turns.ReasonQuotaRPM, RetryAfter: 1500 * time.Millisecond}),
			status: 429, typ: "rate_limit_error", code: "rate_limit_exceeded", header: map[string]string{"Retry-After": "2", "X-Turnpike-Dropped-Reason": turns.ReasonQuotaRPM}},
		{name: "shed by overload", err: wrap(&turns.ShedError{Status: 503, Reason: turns.ReasonSaturated}),
			status: 503, typ: "server_error", code: "server_overloaded", header: map[string]string{"Retry-After": "1", "X-Turnpike-Dropped-Reason": turns.ReasonSaturated}},
		{name: "shed by queue ttl", err: wrap(&turns.ShedError{Status: 408, Reason: turns.ReasonTTLExpired}),
			status: 408, typ: "server_error", code: "queue_timeout", header: map[string]string{"X-Turnpike-Dropped-Reason": turns.ReasonTTLExpired}},
		{name: "request field", err: wrap(&prompt.FieldError{Param: "messages", Code: "empty_array", Message: "empty"}),
			status: 400, typ: "invalid_request_error", code: "empty_array", param: "messages", msg: "empty"},
		{name: "engine prompt too long", err: wrap(&EngineError{Status: 400, Message: "This model's maximum context length is 8192 tokens."}),
			status: 400, typ: "invalid_request_error", code: "context_length_exceeded"},
		{name: "engine 4xx with its code", err: wrap(&EngineError{Status: 422, Message: "bad tool", Code: "invalid_tool", Param: "tools"}),
			status: 422, typ: "invalid_request_error", code: "invalid_tool", param: "tools", msg: "bad tool"},
		{name: "engine 4xx without a code", err: wrap(&EngineError{Status: 404, Message: "no such adapter"}),
			status: 404, typ: "invalid_request_error", code: "not_found", msg: "no such adapter"},
		{name: "engine 400 without a code", err: wrap(&EngineError{Status: 400, Message: "bad"}),
			status: 400, typ: "invalid_request_error", code: "bad_request"},
		{name: "engine rate limit", err: wrap(&EngineError{Status: 429, Message: "slow down"}),
			status: 429, typ: "rate_limit_error", code: "rate_limit_exceeded"},
		{name: "engine 5xx", err: wrap(&EngineError{Status: 500, Message: "boom"}),
			status: 502, typ: "server_error", code: "upstream_error", msg: "The model server failed with status 500: boom"},
		{name: "model not found, named", err: wrap(ModelNotFound("m-x")),
			status: 404, typ: "invalid_request_error", code: "model_not_found", param: "model", msg: "The model 'm-x' does not exist or is not served here."},
		{name: "model not found", err: wrap(ErrModelNotFound), status: 404, typ: "invalid_request_error", code: "model_not_found", param: "model"},
		{name: "no endpoint", err: wrap(ErrNoEndpoint), status: 503, typ: "server_error", code: "no_healthy_endpoint", header: map[string]string{"Retry-After": "1"}},
		{name: "affinity no endpoint", err: wrap(affinity.ErrNoEndpoint), status: 503, typ: "server_error", code: "no_healthy_endpoint"},
		{name: "breaker open", err: wrap(pools.ErrBreakerOpen), status: 503, typ: "server_error", code: "no_healthy_endpoint"},
		{name: "upstream status", err: wrap(&pools.UpstreamError{StatusCode: 500}), status: 502, typ: "server_error", code: "upstream_error"},
		{name: "upstream unreachable", err: wrap(pools.ErrUpstream), status: 502, typ: "server_error", code: "upstream_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ae, ok := APIError(tc.err)
			if !ok {
				t.Fatalf("APIError(%v) is not the turn path's", tc.err)
			}
			if ae.Status != tc.status || ae.Type != tc.typ || ae.Code != tc.code || ae.Param != tc.param {
				t.Errorf("got %d %s code %q param %q, want %d %s %q %q", ae.Status, ae.Type, ae.Code, ae.Param, tc.status, tc.typ, tc.code, tc.param)
			}
			if ae.Message == "" || tc.msg != "" && ae.Message != tc.msg {
				t.Errorf("message %q, want %q", ae.Message, tc.msg)
			}
			for k, v := range tc.header {
				if got := ae.Header.Get(k); got != v {
					t.Errorf("header %s %q, want %q", k, got, v)
				}
			}
		})
	}
	for _, err := range []error{errors.New("disk on fire"), context.Canceled, context.DeadlineExceeded} {
		if ae, ok := APIError(err); ok {
			t.Errorf("APIError(%v) = %+v, want it left to the caller", err, ae)
		}
	}
}
