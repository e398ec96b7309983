package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Error classes of the gateway itself. Handlers return them wrapped; the
// one error handler turns every class into an OpenAI-shaped body.
var (
	ErrModelNotFound = errors.New("gateway: model not found")
	ErrNoEndpoint    = errors.New("gateway: no endpoint available")
)

// invalid is the handlers' 400 naming the offending parameter.
func invalid(param, code, format string, args ...any) *apierror.Error {
	return apierror.Invalid(param, code, format, args...)
}

// statusClientClosedRequest is the conventional status recorded for a
// request whose client disconnected before the answer.
const statusClientClosedRequest = 499

// toAPIError maps an error of any class onto the OpenAI error shape.
func toAPIError(err error) *apierror.Error {
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return ae
	}
	var se *turns.ShedError
	if errors.As(err, &se) {
		return shedError(se)
	}
	if ae, ok := responsesAPIError(err); ok {
		return ae
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return echoError(he)
	}
	var ue *pools.UpstreamError
	switch {
	case errors.Is(err, ErrModelNotFound):
		return apierror.NotFound("model", "model_not_found", "%s", err.Error())
	case errors.Is(err, ErrNoEndpoint), errors.Is(err, affinity.ErrNoEndpoint), errors.Is(err, pools.ErrBreakerOpen):
		return apierror.Unavailable("no_healthy_endpoint", "No healthy endpoint is available for this model; retry later.").WithHeader("Retry-After", "1")
	case errors.As(err, &ue):
		return apierror.New(http.StatusBadGateway, "upstream_error", "The model server failed with status %d.", ue.StatusCode)
	case errors.Is(err, pools.ErrUpstream):
		return apierror.New(http.StatusBadGateway, "upstream_error", "The model server could not be reached.")
	case errors.Is(err, context.Canceled):
		return apierror.New(statusClientClosedRequest, "client_closed_request", "The client closed the request.")
	case errors.Is(err, context.DeadlineExceeded):
		return apierror.New(http.StatusGatewayTimeout, "timeout", "The request timed out.")
	}
	return apierror.Internal(err)
}

// echoError is one of Echo's own errors (no route, no method, body too
// large) in the OpenAI shape.
func echoError(he *echo.HTTPError) *apierror.Error {
	msg := http.StatusText(he.Code)
	if m, ok := he.Message.(string); ok && m != "" {
		msg = m
	}
	code := ""
	switch he.Code {
	case http.StatusRequestEntityTooLarge:
		msg, code = "Request body is too large.", "request_too_large"
	case http.StatusNotFound:
		msg, code = "Unknown route.", "not_found"
	case http.StatusMethodNotAllowed:
		code = "method_not_allowed"
	case http.StatusUnauthorized:
		code = "invalid_api_key"
	}
	return apierror.New(he.Code, code, "%s", msg).WithClass(he)
}

// errorHandler is Echo's HTTPErrorHandler: every error leaves as an
// OpenAI-shaped body, unless the response has already started, in which
// case nothing more can be said.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	if errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil {
		// The client went away (often while its turn was queued): nobody
		// is left to read an answer, and it is not a server error.
		s.log.Debug("client closed the request", "path", c.Path(), "request_id", c.Response().Header().Get(echo.HeaderXRequestID))
		s.metrics.errors.WithLabelValues("client_closed_request").Inc()
		c.Response().WriteHeader(statusClientClosedRequest)
		return
	}
	ae := toAPIError(err)
	if ae.Status >= 500 {
		s.log.Warn("request failed", "path", c.Path(), "request_id", c.Response().Header().Get(echo.HeaderXRequestID), "err", err)
	}
	s.metrics.errors.WithLabelValues(errorClass(ae)).Inc()
	ae.Write(c.Response())
}

// errorClass is the metrics label of an error: its code, else its type.
func errorClass(ae *apierror.Error) string {
	if ae.Code != "" {
		return ae.Code
	}
	return ae.Type
}
