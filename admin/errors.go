package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/pools"
)

// Error classes. Service methods return *apierror.Error values that unwrap
// to one of them, so callers can test errors.Is(err, ErrNotFound) and the
// handlers can answer with the error as it is.
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

func invalidf(param, format string, args ...any) *apierror.Error {
	return apierror.Invalid(param, "invalid_value", format, args...).WithClass(ErrInvalid)
}

func notFoundf(param, code, format string, args ...any) *apierror.Error {
	return apierror.NotFound(param, code, format, args...).WithClass(ErrNotFound)
}

func configured(param, format string, args ...any) *apierror.Error {
	return apierror.Conflict(param, "defined_in_config", format, args...).WithClass(ErrConfigured)
}

func unavailable(what string) *apierror.Error {
	return apierror.New(http.StatusNotImplemented, "not_enabled", "This gateway runs without %s.", what).WithClass(ErrUnavailable)
}

// asError maps an error of any class onto an *apierror.Error; what it does
// not know is a 500 that says nothing of the cause.
func asError(err error) *apierror.Error {
	var e *apierror.Error
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
	return apierror.Internal(err)
}

// validationError is the 400 of the problems turns' validation found,
// each a pools.FieldError. Its param is the first offending field as the
// request body names it, less section (the part of the config the body
// stands for: "flowControl.", "tenants[0]."), and its message lists every
// problem the same way.
func validationError(err error, section string) *apierror.Error {
	fes := pools.FieldErrors(err)
	if len(fes) == 0 {
		return invalidf("", "%v", err)
	}
	problems := make([]string, len(fes))
	for i, fe := range fes {
		problems[i] = strings.TrimPrefix(fe.Field, section) + ": " + fe.Message
	}
	return invalidf(strings.TrimPrefix(fes[0].Field, section), "%s", strings.Join(problems, "; "))
}
