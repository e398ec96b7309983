package wire

import (
	"errors"

	"github.com/turnpike-gateway/turnpike/apierror"
)

// ErrInvalid: the request is malformed or names something it may not.
var ErrInvalid = errors.New("responses: invalid request")

// invalidf is the 400 of a request that is malformed or names something
// it may not, with the class ErrInvalid.
func Invalidf(param, code, format string, args ...any) *apierror.Error {
	return apierror.Invalid(param, code, format, args...).WithClass(ErrInvalid)
}
