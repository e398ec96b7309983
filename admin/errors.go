package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Error classes. Service methods return *Error values that unwrap to one of
// them, so callers can test errors.Is(err, ErrNotFound) and the handlers
// can answer with the error as it is.
var (
	// ErrNotFound: no such tenant, key, endpoint or session.
	ErrNotFound = errors.New("admin: not found")
	// ErrExists: a tenant of that name exists already.
	ErrExists = errors.New("admin: already exists")
	// ErrInvalid: the request is malformed or a value is out of range.
	ErrInvalid = errors.New("admin: invalid")
	// ErrConfigured: the tenant or key is defined in the config file and
	// cannot be changed through the API.
	ErrConfigured = errors.New("admin: defined in the config file")
	// ErrUnavailable: the gateway runs without the part the route needs
	// (flow control, sessions).
	ErrUnavailable = errors.New("admin: not available")
)

// Error is an OpenAI-shaped error: the body {"error":{...}} and the HTTP
// status it is sent with.
type Error struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`

	class error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the error's class.
func (e *Error) Unwrap() error { return e.class }

func newError(class error, status int, param, code, format string, args ...any) *Error {
	e := &Error{Status: status, Type: "invalid_request_error", Message: fmt.Sprintf(format, args...), class: class}
	if status >= 500 {
		e.Type = "server_error"
	}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

func invalidf(param, format string, args ...any) *Error {
	return newError(ErrInvalid, http.StatusBadRequest, param, "invalid_value", format, args...)
}

func notFoundf(param, code, format string, args ...any) *Error {
	return newError(ErrNotFound, http.StatusNotFound, param, code, format, args...)
}

// asError maps an error of any class onto an *Error; what it does not
// know is a 500 that says nothing of the cause.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return invalidf("", "The body is not valid JSON: %v.", err)
	case errors.As(err, &te):
		return invalidf(te.Field, "%s must be %s, not %s.", te.Field, te.Type, te.Value)
	case errors.Is(err, ErrNotFound):
		return notFoundf("", "not_found", "%v", err)
	}
	return newError(err, http.StatusInternalServerError, "", "", "Internal error.")
}

// validationError turns a joined error of turns' Validate functions
// ("turns: flowControl.shed.full: 2 is not in (start, 1]") into a 400 whose
// param is the first offending field, less strip (the section the request
// body stands for).
func validationError(err error, strip string) *Error {
	lines := strings.Split(err.Error(), "\n")
	var param string
	for i, l := range lines {
		l = strings.TrimPrefix(l, "turns: ")
		l = strings.TrimPrefix(l, strip)
		if i == 0 {
			param, _, _ = strings.Cut(l, ":")
		}
		lines[i] = l
	}
	return invalidf(param, "%s", strings.Join(lines, "; "))
}
