package dispatch

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/budgets"
	"github.com/turnpike-gateway/turnpike/guard"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// APIError is err in the OpenAI error shape when it is an error of the
// turn path: flow control's verdict, a request the parser refused, an
// engine's refusal, a model no pool serves, no endpoint to take the turn,
// an engine that failed or could not be reached. It is the one mapping
// chat, the Responses API (HTTP and WebSocket) and the Batch API answer
// with, so that one failure gets one status and code whichever API
// carried the turn. ok is false for an error of any other kind, which the
// caller maps itself.
func APIError(err error) (ae *apierror.Error, ok bool) {
	var (
		se *ShedError
		fe *prompt.FieldError
		ee *EngineError
		ue *pools.UpstreamError
		gr *guard.Refusal
		ob *budgets.OverBudget
	)
	switch {
	case errors.As(err, &se):
		ae := shedAPIError(se)
		if errors.As(err, &ob) {
			h := http.Header{}
			ob.Limits.Set(h)
			for k := range h {
				ae = ae.WithHeader(k, h.Get(k))
			}
		}
		return ae, true
	case errors.As(err, &gr):
		msg := "The input was refused by the content check '" + gr.Check + "'."
		if gr.Reason != "" {
			msg = "The input was refused by the content check '" + gr.Check + "': " + gr.Reason
		}
		return apierror.New(http.StatusBadRequest, "content_policy_violation", "%s", msg).WithClass(gr), true
	case errors.Is(err, guard.ErrUnavailable):
		return apierror.Unavailable("content_check_unavailable", "The content check could not be made; retry later.").
			WithHeader("Retry-After", "1").WithClass(guard.ErrUnavailable), true
	case errors.As(err, &fe):
		return apierror.Invalid(fe.Param, fe.Code, "%s", fe.Message).WithClass(fe), true
	case errors.As(err, &ee):
		return engineAPIError(ee), true
	case errors.Is(err, ErrModelNotFound):
		msg := "The model does not exist or is not served here."
		if me := (*modelError)(nil); errors.As(err, &me) {
			msg = "The model '" + me.model + "' does not exist or is not served here."
		}
		return apierror.NotFound("model", "model_not_found", "%s", msg).WithClass(ErrModelNotFound), true
	case errors.Is(err, ErrNoEndpoint), errors.Is(err, affinity.ErrNoEndpoint), errors.Is(err, pools.ErrBreakerOpen):
		return apierror.Unavailable("no_healthy_endpoint", "No healthy endpoint is available for this model; retry later.").WithHeader("Retry-After", "1").WithClass(ErrNoEndpoint), true
	case errors.As(err, &ue):
		return apierror.New(http.StatusBadGateway, "upstream_error", "The model server failed with status %d.", ue.StatusCode).WithClass(pools.ErrUpstream), true
	case errors.Is(err, pools.ErrUpstream):
		return apierror.New(http.StatusBadGateway, "upstream_error", "The model server could not be reached.").WithClass(pools.ErrUpstream), true
	}
	return nil, false
}

// shedAPIError turns flow control's verdict into the answer a client can
// act on: 429/503/408 with Retry-After and the reason.
func shedAPIError(se *ShedError) *apierror.Error {
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

// engineAPIError is an engine's answer that was not a stream, in the shape
// every other error has, keeping the engine's message: its own code when it
// gave one as a string, else context_length_exceeded for a prompt too long,
// rate_limit_exceeded for a 429, and the status's name for another 4xx
// (not_found), each with the engine's status. Anything that is not a 4xx
// is the model server failing: 502 upstream_error.
func engineAPIError(ee *EngineError) *apierror.Error {
	if ee.Status < 400 || ee.Status >= 500 {
		code := ee.Code
		if code == "" {
			code = "upstream_error"
		}
		return apierror.New(http.StatusBadGateway, code, "The model server failed with status %d: %s", ee.Status, ee.Message).WithClass(ee)
	}
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
			code = "invalid_request"
		}
	}
	return apierror.New(ee.Status, code, "%s", ee.Message).WithParam(ee.Param).WithClass(ee)
}
