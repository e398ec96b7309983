package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
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
	var se *dispatch.ShedError
	if errors.As(err, &se) {
		return shedError(se)
	}
	var fe *prompt.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Param, fe.Code, "%s", fe.Message).WithClass(fe)
	}
	var ee *dispatch.EngineError
	if errors.As(err, &ee) {
		return engineAPIError(ee)
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
	case errors.Is(err, dispatch.ErrModelNotFound):
		return apierror.NotFound("model", "model_not_found", "%s", err.Error())
	case errors.Is(err, dispatch.ErrNoEndpoint), errors.Is(err, affinity.ErrNoEndpoint), errors.Is(err, pools.ErrBreakerOpen):
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

// shedError turns flow control's verdict into the answer a client can act
// on: 429/503/408 with Retry-After and the reason.
func shedError(se *dispatch.ShedError) *apierror.Error {
	code := "rate_limit_exceeded"
	typ := apierror.TypeRateLimit
	msg := "The request was not admitted: " + se.Reason + ". Retry after the indicated delay."
	switch se.Status {
	case http.StatusServiceUnavailable:
		code, typ = "server_overloaded", apierror.TypeServer
	case http.StatusRequestTimeout:
		code, typ = "queue_timeout", apierror.TypeServer
		msg = "The request waited in the queue longer than its band allows."
	}
	return apierror.New(se.Status, code, "%s", msg).WithType(typ).WithClass(se).
		WithHeader("Retry-After", strconv.Itoa(se.RetryAfterSeconds())).
		WithHeader("X-Turnpike-Dropped-Reason", se.Reason)
}

// engineAPIError is an engine's refusal in the OpenAI shape every other
// error has, keeping the engine's status and message: a string code (the
// engine's own when it gave one as a string), invalid_request_error for a
// 4xx, rate_limit_error for a 429; anything else from an engine that is
// not a 4xx is a bad gateway.
func engineAPIError(ee *dispatch.EngineError) *apierror.Error {
	code := ee.Code
	switch {
	case code != "":
	case ee.ContextLength():
		code = "context_length_exceeded"
	case ee.Status == http.StatusTooManyRequests:
		code = "rate_limit_exceeded"
	default:
		code = strings.ReplaceAll(strings.ToLower(http.StatusText(ee.Status)), " ", "_")
		if code == "" {
			code = "engine_error"
		}
	}
	status := ee.Status
	if status < 400 || status >= 500 {
		status = http.StatusBadGateway
	}
	return apierror.New(status, code, "%s", ee.Message).WithParam(ee.Param).WithClass(ee)
}

// ignoreEOF is err, or nil for io.EOF: a stream that ended whole.
func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
