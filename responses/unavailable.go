package responses

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/state"
)

// ErrUnavailable: the state store could not be reached, or refused, so
// nothing was read or stored (state.ErrUnavailable). The request may
// succeed once the store is back: it is answered with 503 and
// Retry-After, the same on every route, and a response that is to be
// stored is refused before its engine request while the store is down.
var ErrUnavailable = errors.New("responses: state store unavailable")

// storeRetryAfter is the Retry-After of a store outage, in seconds: about
// how long the state store's probe takes to see the store back.
const storeRetryAfter = "1"

// storeUnavailable is the 503 of a store outage. Its class wraps
// ErrUnavailable and cause, which wraps state.ErrUnavailable.
func storeUnavailable(cause error) *apierror.Error {
	return apierror.Unavailable("store_unavailable", "The state store is unavailable: nothing was read or stored. Retry after the indicated delay.").
		WithHeader("Retry-After", storeRetryAfter).
		WithClass(fmt.Errorf("%w: %w", ErrUnavailable, cause))
}

// Health is nil while the state store answers, else the 503 of its outage
// (storeUnavailable): an atomic load, asked before every response that is
// to be stored.
func (s *StateStore) Health() error {
	if err := s.ns.Health(); err != nil {
		return storeUnavailable(err)
	}
	return nil
}

// storeFailure is how a failure to store a response that has ended is
// told to its client: the store's own *apierror.Error (an outage's 503),
// else a 500 that says the response was not stored.
func storeFailure(err error) *apierror.Error {
	var ae *apierror.Error
	if errors.As(err, &ae) {
		return ae
	}
	if errors.Is(err, state.ErrUnavailable) {
		return storeUnavailable(err)
	}
	return apierror.New(http.StatusInternalServerError, "server_error", "The response could not be stored.").WithClass(err)
}

// cause is what a log line of err should say: the class of an
// *apierror.Error that has one (a store outage's names the store's own
// failure), else err.
func cause(err error) error {
	var ae *apierror.Error
	if errors.As(err, &ae) && ae.Class != nil {
		return ae.Class
	}
	return err
}
