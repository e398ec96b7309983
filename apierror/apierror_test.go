package apierror_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/turnpike-gateway/turnpike/apierror"
)

var errClass = errors.New("test: class")

// TestShapes: each constructor's status, type, param and code, and the
// body each is sent as.
func TestShapes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    *apierror.Error
		status int
		typ    string
		body   string
	}{
		{name: "invalid", err: apierror.Invalid("model", "missing_required_parameter", "Missing required parameter: '%s'.", "model"),
			status: 400, typ: apierror.TypeInvalidRequest,
			body: `{"error":{"message":"Missing required parameter: 'model'.","type":"invalid_request_error","param":"model","code":"missing_required_parameter"}}`},
		{name: "invalid without param or code", err: apierror.Invalid("", "", "The body is empty."),
			status: 400, typ: apierror.TypeInvalidRequest,
			body: `{"error":{"message":"The body is empty.","type":"invalid_request_error","param":null,"code":null}}`},
		{name: "not found", err: apierror.NotFound("id", "endpoint_not_found", "No endpoint %q.", "x"),
			status: 404, typ: apierror.TypeInvalidRequest,
			body: `{"error":{"message":"No endpoint \"x\".","type":"invalid_request_error","param":"id","code":"endpoint_not_found"}}`},
		{name: "conflict", err: apierror.Conflict("name", "tenant_exists", "exists"),
			status: 409, typ: apierror.TypeInvalidRequest,
			body: `{"error":{"message":"exists","type":"invalid_request_error","param":"name","code":"tenant_exists"}}`},
		{name: "rate limited", err: apierror.RateLimited("rate_limit_exceeded", "slow down"),
			status: 429, typ: apierror.TypeRateLimit,
			body: `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`},
		{name: "unavailable", err: apierror.Unavailable("no_healthy_endpoint", "later"),
			status: 503, typ: apierror.TypeServer,
			body: `{"error":{"message":"later","type":"server_error","param":null,"code":"no_healthy_endpoint"}}`},
		{name: "internal", err: apierror.Internal(errors.New("disk on fire")),
			status: 500, typ: apierror.TypeServer,
			body: `{"error":{"message":"Internal error.","type":"server_error","param":null,"code":null}}`},
		{name: "new 502", err: apierror.New(http.StatusBadGateway, "upstream_error", "The model server failed."),
			status: 502, typ: apierror.TypeServer,
			body: `{"error":{"message":"The model server failed.","type":"server_error","param":null,"code":"upstream_error"}}`},
		{name: "new 401", err: apierror.New(http.StatusUnauthorized, "invalid_api_key", "Incorrect API key provided."),
			status: 401, typ: apierror.TypeInvalidRequest,
			body: `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
		{name: "type set", err: apierror.New(http.StatusRequestTimeout, "queue_timeout", "waited").WithType(apierror.TypeServer),
			status: 408, typ: apierror.TypeServer,
			body: `{"error":{"message":"waited","type":"server_error","param":null,"code":"queue_timeout"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err.Status != tc.status || tc.err.Type != tc.typ {
				t.Errorf("status %d type %s, want %d %s", tc.err.Status, tc.err.Type, tc.status, tc.typ)
			}
			if got := string(tc.err.Body()); got != tc.body {
				t.Errorf("body\n%s\nwant\n%s", got, tc.body)
			}
		})
	}
}

func TestClass(t *testing.T) {
	var err error = apierror.NotFound("", "not_found", "gone").WithClass(errClass)
	if !errors.Is(err, errClass) {
		t.Error("an error is not its class")
	}
	cause := errors.New("cause")
	if err := apierror.Internal(cause); !errors.Is(err, cause) || err.Error() != "Internal error." {
		t.Errorf("Internal: %v, unwraps to the cause: %v", err, errors.Is(err, cause))
	}
	var ae *apierror.Error
	if wrapped := errors.Join(errors.New("other"), err); !errors.As(wrapped, &ae) || ae.Status != 404 {
		t.Errorf("errors.As through a join: %v", ae)
	}
}

func TestWrite(t *testing.T) {
	e := apierror.RateLimited("rate_limit_exceeded", "later").
		WithHeader("Retry-After", "3").
		WithHeader("X-Turnpike-Dropped-Reason", "quota-rpm")
	rec := httptest.NewRecorder()
	rec.Header().Set("Retry-After", "99")
	e.Write(rec)
	if rec.Code != 429 {
		t.Errorf("status %d", rec.Code)
	}
	h := rec.Header()
	if h.Get("Content-Type") != "application/json" || h.Values("Retry-After")[0] != "3" || len(h.Values("Retry-After")) != 1 ||
		h.Get("X-Turnpike-Dropped-Reason") != "quota-rpm" {
		t.Errorf("headers %v", h)
	}
	if rec.Body.String() != string(e.Body()) {
		t.Errorf("body %s", rec.Body)
	}
	// The error's own headers are not the response's to change.
	h.Set("Retry-After", "0")
	if e.Header.Get("Retry-After") != "3" {
		t.Error("Write shares the error's header values with the response")
	}
}
