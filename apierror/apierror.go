package apierror

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// Types of error, as OpenAI names them.
const (
	// TypeInvalidRequest: the client can fix the request (every 4xx but
	// 429).
	TypeInvalidRequest = "invalid_request_error"
	// TypeRateLimit: the client sent too much; it may try again later (429).
	TypeRateLimit = "rate_limit_error"
	// TypeServer: turnpike or an engine failed; the request may be fine
	// (5xx).
	TypeServer = "server_error"
)

// Error is an OpenAI-shaped error and how it is sent. Build it with a
// constructor; the zero value is not useful.
type Error struct {
	// Status is the HTTP status the error is sent with.
	Status int
	// Type is one of the Type constants.
	Type string
	// Message tells the client what went wrong and, where it can, what to
	// do about it. It never holds a secret the client sent.
	Message string
	// Param names the offending request parameter; "" is null.
	Param string
	// Code is the machine-readable code ("model_not_found"); "" is null.
	Code string
	// Header holds extra response headers; nil for none.
	Header http.Header
	// Class is the sentinel the error unwraps to; nil for none.
	Class error
}

// TypeFor is the type of an error sent with status: rate_limit_error for
// 429, server_error from 500 up, invalid_request_error otherwise.
func TypeFor(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return TypeRateLimit
	case status >= 500:
		return TypeServer
	}
	return TypeInvalidRequest
}

// New returns an error sent with status, of TypeFor(status), with code and
// the message format makes of args.
func New(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Type: TypeFor(status), Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid is a 400 about the request parameter param ("" when the request
// as a whole is wrong).
func Invalid(param, code, format string, args ...any) *Error {
	return New(http.StatusBadRequest, code, format, args...).WithParam(param)
}

// NotFound is a 404: no such object, or one the caller may not see.
func NotFound(param, code, format string, args ...any) *Error {
	return New(http.StatusNotFound, code, format, args...).WithParam(param)
}

// Conflict is a 409: the request is well formed but the object's state
// does not allow it.
func Conflict(param, code, format string, args ...any) *Error {
	return New(http.StatusConflict, code, format, args...).WithParam(param)
}

// RateLimited is a 429: the client is over a limit and may try again later.
func RateLimited(code, format string, args ...any) *Error {
	return New(http.StatusTooManyRequests, code, format, args...)
}

// Unavailable is a 503: turnpike cannot serve the request now, through no
// fault of the request.
func Unavailable(code, format string, args ...any) *Error {
	return New(http.StatusServiceUnavailable, code, format, args...)
}

// Internal is a 500 that says nothing of its cause, which becomes its
// class: the cause is for the log, not for the client.
func Internal(cause error) *Error {
	return New(http.StatusInternalServerError, "", "Internal error.").WithClass(cause)
}

// WithParam sets Param and returns e.
func (e *Error) WithParam(param string) *Error {
	e.Param = param
	return e
}

// WithClass sets Class and returns e.
func (e *Error) WithClass(class error) *Error {
	e.Class = class
	return e
}

// WithType sets Type, for the few errors whose type is not their status's
// (a 408 of a queue timeout is the server's doing), and returns e.
func (e *Error) WithType(typ string) *Error {
	e.Type = typ
	return e
}

// WithHeader adds a response header and returns e.
func (e *Error) WithHeader(key, value string) *Error {
	if e.Header == nil {
		e.Header = http.Header{}
	}
	e.Header.Add(key, value)
	return e
}

// Error is the message: what a log line of the error should say.
func (e *Error) Error() string { return e.Message }

// Unwrap returns the class, so errors.Is(err, class) holds.
func (e *Error) Unwrap() error { return e.Class }

// MarshalJSON writes the object inside {"error": …}: message, type, param
// and code, the last two null when empty, as OpenAI's clients expect them.
func (e *Error) MarshalJSON() ([]byte, error) {
	return json.Marshal(wire{Message: e.Message, Type: e.Type, Param: nullable(e.Param), Code: nullable(e.Code)})
}

type wire struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// internalBody is what Body falls back to: it cannot fail.
const internalBody = `{"error":{"message":"Internal error.","type":"server_error","param":null,"code":null}}`

// Body is the whole response body, {"error":{…}}.
func (e *Error) Body() []byte {
	b, err := json.Marshal(struct {
		Error *Error `json:"error"`
	}{e})
	if err != nil {
		// Every field is a string: this cannot happen.
		return []byte(internalBody)
	}
	return b
}

// Write sends e as the whole response: its headers, a JSON content type,
// its status and Body. It must be called before anything else is written.
func (e *Error) Write(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range e.Header {
		h[k] = slices.Clone(vs)
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	w.Write(e.Body())
}

var (
	_ error          = (*Error)(nil)
	_ json.Marshaler = (*Error)(nil)
)
