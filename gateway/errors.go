package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Error classes of the gateway itself. Handlers return them wrapped; the
// one error handler turns every class into an OpenAI-shaped body.
var (
	ErrModelNotFound = errors.New("gateway: model not found")
	ErrNoEndpoint    = errors.New("gateway: no endpoint available")
)

// APIError is an OpenAI-shaped error: the body {"error":{...}} and the
// HTTP status it is sent with.
type APIError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// Header holds extra response headers (Retry-After, dropped reason).
	Header http.Header `json:"-"`
}

func (e *APIError) Error() string { return e.Message }

// invalid builds a 400 invalid_request_error naming the offending parameter.
func invalid(param, code, format string, args ...any) *APIError {
	e := &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...)}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

func strp(s string) *string { return &s }

// statusClientClosedRequest is the conventional status recorded for a
// request whose client disconnected before the answer.
const statusClientClosedRequest = 499

// toAPIError maps an error of any class onto the OpenAI error shape.
func toAPIError(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	var se *turns.ShedError
	if errors.As(err, &se) {
		return shedError(se)
	}
	var ade *admin.Error
	if errors.As(err, &ade) {
		return &APIError{Status: ade.Status, Message: ade.Message, Type: ade.Type, Param: ade.Param, Code: ade.Code}
	}
	if ae, ok := responsesAPIError(err); ok {
		return ae
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok && m != "" {
			msg = m
		}
		e := &APIError{Status: he.Code, Type: "invalid_request_error", Message: msg}
		switch he.Code {
		case http.StatusRequestEntityTooLarge:
			e.Message = "Request body is too large."
			e.Code = strp("request_too_large")
		case http.StatusNotFound:
			e.Message = "Unknown route."
			e.Code = strp("not_found")
		case http.StatusMethodNotAllowed:
			e.Code = strp("method_not_allowed")
		case http.StatusUnauthorized:
			e.Code = strp("invalid_api_key")
		}
		if he.Code >= 500 {
			e.Type = "server_error"
		}
		return e
	}
	var ue *pools.UpstreamError
	switch {
	case errors.Is(err, ErrModelNotFound):
		return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found"), Message: err.Error()}
	case errors.Is(err, ErrNoEndpoint), errors.Is(err, affinity.ErrNoEndpoint), errors.Is(err, pools.ErrBreakerOpen):
		return &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: strp("no_healthy_endpoint"), Message: "No healthy endpoint is available for this model; retry later.", Header: http.Header{"Retry-After": {"1"}}}
	case errors.As(err, &ue):
		return &APIError{Status: http.StatusBadGateway, Type: "server_error", Code: strp("upstream_error"), Message: fmt.Sprintf("The model server failed with status %d.", ue.StatusCode)}
	case errors.Is(err, pools.ErrUpstream):
		return &APIError{Status: http.StatusBadGateway, Type: "server_error", Code: strp("upstream_error"), Message: "The model server could not be reached."}
	case errors.Is(err, context.Canceled):
		return &APIError{Status: statusClientClosedRequest, Type: "invalid_request_error", Code: strp("client_closed_request"), Message: "The client closed the request."}
	case errors.Is(err, context.DeadlineExceeded):
		return &APIError{Status: http.StatusGatewayTimeout, Type: "server_error", Code: strp("timeout"), Message: "The request timed out."}
	}
	return &APIError{Status: http.StatusInternalServerError, Type: "server_error", Message: "Internal error."}
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
	for k, vs := range ae.Header {
		c.Response().Header()[k] = vs
	}
	s.metrics.errors.WithLabelValues(errorClass(ae)).Inc()
	writeJSON(c, ae.Status, struct {
		Error *APIError `json:"error"`
	}{ae})
}

func errorClass(ae *APIError) string {
	if ae.Code != nil {
		return *ae.Code
	}
	return ae.Type
}

func writeJSON(c echo.Context, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"Internal error.","type":"server_error","param":null,"code":null}}`)
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().WriteHeader(status)
	c.Response().Write(b)
}
