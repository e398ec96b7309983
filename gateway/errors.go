package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/state"
)

// invalid is the handlers' 400 naming the offending parameter.
func invalid(param, code, format string, args ...any) *apierror.Error {
	return apierror.Invalid(param, code, format, args...)
}

// statusClientClosedRequest is the conventional status recorded for a
// request whose client disconnected before the answer.
const statusClientClosedRequest = 499

// toAPIError maps an error of any class onto the OpenAI error shape: an
// *apierror.Error as it is, the turn path's errors as dispatch.APIError
// maps them for every API, then the Responses store's, Echo's own and the
// context's.
func toAPIError(err error) *apierror.Error {
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return ae
	}
	if ae, ok := dispatch.APIError(err); ok {
		return ae
	}
	if ae, ok := responsesAPIError(err); ok {
		return ae
	}
	var he *echo.HTTPError
	switch {
	case errors.As(err, &he):
		return echoError(he)
	case errors.Is(err, state.ErrUnavailable):
		// The Files, Batch and admin APIs hand the store's failures up as
		// they are; the Responses API words them itself, alike.
		return apierror.Unavailable("store_unavailable", "The state store is unavailable; retry later.").WithHeader("Retry-After", "1").WithClass(err)
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

// ignoreEOF is err, or nil for io.EOF: a stream that ended whole.
func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
