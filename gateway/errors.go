package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
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
	var se *dispatch.ShedError
	if errors.As(err, &se) {
		return shedError(se)
	}
	var fe *prompt.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Param, fe.Code, "%s", fe.Message)
	}
	var ee *dispatch.EngineError
	if errors.As(err, &ee) {
		return engineAPIError(ee)
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
	case errors.Is(err, dispatch.ErrModelNotFound):
		return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Param: strp("model"), Code: strp("model_not_found"), Message: err.Error()}
	case errors.Is(err, dispatch.ErrNoEndpoint), errors.Is(err, affinity.ErrNoEndpoint), errors.Is(err, pools.ErrBreakerOpen):
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

// shedError turns flow control's verdict into the answer a client can act
// on: 429/503/408 with Retry-After and the reason.
func shedError(se *dispatch.ShedError) *APIError {
	code := "rate_limit_exceeded"
	typ := "rate_limit_error"
	msg := "The request was not admitted: " + se.Reason + ". Retry after the indicated delay."
	switch se.Status {
	case http.StatusServiceUnavailable:
		code, typ = "server_overloaded", "server_error"
	case http.StatusRequestTimeout:
		code, typ = "queue_timeout", "server_error"
		msg = "The request waited in the queue longer than its band allows."
	}
	return &APIError{
		Status: se.Status, Type: typ, Code: strp(code), Message: msg,
		Header: http.Header{
			"Retry-After":               {strconv.Itoa(se.RetryAfterSeconds())},
			"X-Turnpike-Dropped-Reason": {se.Reason},
		},
	}
}

// engineAPIError is an engine's refusal in the OpenAI shape every other
// error has, keeping the engine's status and message: a string code (the
// engine's own when it gave one as a string), invalid_request_error for a
// 4xx, rate_limit_error for a 429.
func engineAPIError(ee *dispatch.EngineError) *APIError {
	e := &APIError{Status: ee.Status, Type: "invalid_request_error", Message: ee.Message}
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
	e.Code = &code
	if ee.Status == http.StatusTooManyRequests {
		e.Type = "rate_limit_error"
	}
	if ee.Status >= 500 || ee.Status < 400 {
		e.Status, e.Type = http.StatusBadGateway, "server_error"
	}
	if ee.Param != "" {
		e.Param = &ee.Param
	}
	return e
}

// ignoreEOF is err, or nil for io.EOF: a stream that ended whole.
func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
