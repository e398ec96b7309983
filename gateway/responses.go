package gateway

import (
	"errors"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/responses/api"
)

// DefaultWebSocketLimit is the default of Options.WebSocketLimit.
const DefaultWebSocketLimit = api.DefaultWebSocketLimit

// mountResponses registers the Responses and Conversations API
// (responses/api) on v1. Without a service the routes are not
// registered.
func (s *Server) mountResponses(v1 *echo.Group) error {
	if s.opts.Responses == nil {
		return nil
	}
	a, err := api.New(api.Options{
		Service:        s.opts.Responses,
		Tracer:         s.opts.Tracer,
		MessageLimit:   s.opts.BodyLimit,
		WebSocketLimit: s.opts.WebSocketLimit,
		Metrics:        s.opts.Metrics,
	})
	if err != nil {
		return err
	}
	a.Register(v1, api.Front{
		Tenant:        tenantOf,
		ReadChecked:   s.readChecked,
		NameModelRule: s.nameModelRule,
		Observe: func(route string, status int, start time.Time) {
			s.metrics.observeRequest(route, status, start, 0)
		},
		Error:        toAPIError,
		ShuttingDown: ErrShuttingDown,
	})
	return nil
}

// tenantOf is the request's tenant: the one the tenancy middleware set,
// else the default tenant of an open gateway.
func tenantOf(c echo.Context) string {
	if t := TenantOf(c); t != "" {
		return t
	}
	return DefaultTenant
}

// responsesAPIError maps the responses package's bare classes, which its
// store returns as they are; every other error of the package is an
// *apierror.Error already.
func responsesAPIError(err error) (*apierror.Error, bool) {
	switch {
	case errors.Is(err, responses.ErrNotFound):
		return apierror.NotFound("", "not_found", "Not found."), true
	case errors.Is(err, responses.ErrClosed):
		return apierror.Unavailable("unavailable", "The state store is closed; retry on another gateway."), true
	}
	return nil, false
}
