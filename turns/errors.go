package turns

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Reasons a turn is shed, as sent in x-turnpike-dropped-reason.
const (
	// ReasonSaturated: a Background turn shed by the shed curve.
	ReasonSaturated = "saturated"
	// ReasonOverShare: a Standard turn from a tenant holding more than its
	// weighted share of the tokens in the gateway, shed by the shed curve.
	ReasonOverShare = "over-share"
	// ReasonQuotaRPM, ReasonQuotaTPM and ReasonQuotaConcurrency: the
	// tenant's Quota.
	ReasonQuotaRPM         = "quota-rpm"
	ReasonQuotaTPM         = "quota-tpm"
	ReasonQuotaConcurrency = "quota-concurrency"
	// ReasonBandHeld: a Standard or Background turn arrived while the pool
	// had no room for its band and the band already held its
	// BandConfig.HeldPerEndpoint turns.
	ReasonBandHeld = "band-held"
	// ReasonQueueFull: the band's queue in the pool is at a cap.
	ReasonQueueFull = "queue-full"
	// ReasonTTLExpired: the turn waited its band's TTL.
	ReasonTTLExpired = "ttl-expired"
	// ReasonPastTTL: the turn was about to wait its band's TTL and no
	// engine's queue would start it within what was left of it: shed before
	// the TTL, with the wait the best engine's queue promised as
	// Retry-After.
	ReasonPastTTL = "past-ttl"
	// ReasonNoEndpoints: the turn waited its band's TTL and the pool still
	// has no available endpoint.
	ReasonNoEndpoints = "no-endpoints"
	// ReasonShuttingDown: the Controller is closed.
	ReasonShuttingDown = "shutting-down"
)

// ErrShed is the class of every *ShedError: errors.Is(err, ErrShed).
var ErrShed = errors.New("turns: shed")

// ShedError is why Acquire refused a turn. The gateway answers with Status,
// a Retry-After header of RetryAfter (rounded up to whole seconds) and an
// x-turnpike-dropped-reason header of Reason.
type ShedError struct {
	// Status is the HTTP status: 429 for the tenant's own limits, 503 for
	// overload or for a turn that waited its band's TTL for an endpoint,
	// 408 for a turn that waited its band's TTL for a slot.
	Status int
	// Reason is one of the Reason constants.
	Reason string
	// RetryAfter is when trying again may succeed.
	RetryAfter time.Duration
}

func (e *ShedError) Error() string {
	return fmt.Sprintf("turns: shed (%d %s, retry after %v)", e.Status, e.Reason, e.RetryAfter)
}

// Is makes errors.Is(err, ErrShed) true.
func (e *ShedError) Is(target error) bool { return target == ErrShed }

// RetryAfterSeconds is RetryAfter as the Retry-After header's whole
// seconds, rounded up, at least 1.
func (e *ShedError) RetryAfterSeconds() int {
	return max(int((e.RetryAfter+time.Second-1)/time.Second), 1)
}

// statusOf is the HTTP status each reason is sent with.
func statusOf(reason string) int {
	switch reason {
	case ReasonQuotaRPM, ReasonQuotaTPM, ReasonQuotaConcurrency, ReasonOverShare:
		return http.StatusTooManyRequests
	case ReasonTTLExpired:
		return http.StatusRequestTimeout
	}
	return http.StatusServiceUnavailable
}

func shed(reason string, retryAfter time.Duration) *ShedError {
	return &ShedError{Status: statusOf(reason), Reason: reason, RetryAfter: retryAfter}
}

// reasons lists every reason, for metrics.
var reasons = [...]string{
	ReasonSaturated, ReasonOverShare, ReasonQuotaRPM, ReasonQuotaTPM,
	ReasonQuotaConcurrency, ReasonBandHeld, ReasonQueueFull, ReasonTTLExpired, ReasonPastTTL,
	ReasonNoEndpoints, ReasonShuttingDown,
}
