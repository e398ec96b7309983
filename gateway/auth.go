package gateway

import (
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/auth"
)

// Tenancy names.
const (
	// TenantContextKey is the echo.Context key under which the tenant
	// middleware stores the request's tenant name; read it with TenantOf.
	TenantContextKey = "tenant"
	// DefaultTenant is the tenant of every request while the gateway runs
	// open, with no tenants defined.
	DefaultTenant = auth.DefaultTenant
)

// requireTenant is the middleware of the public API: it sets the request's
// tenant (TenantOf) or answers 401 invalid_api_key.
func requireTenant(a *auth.Authenticator) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Request().Header.Get(echo.HeaderAuthorization)
			tenant, ok := a.Authenticate(h)
			if !ok {
				return unauthorized("invalid_api_key", h)
			}
			c.Set(TenantContextKey, tenant)
			return next(c)
		}
	}
}

// requireAdmin is the middleware of /admin/v1. With no admin token it
// answers 404, as for a route that does not exist: an API that cannot be
// opened should not invite anyone to guess its token. Otherwise a request
// without the admin token, a tenant's key included, gets 401.
func requireAdmin(a *auth.Authenticator) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !a.AdminEnabled() {
				return echo.ErrNotFound
			}
			h := c.Request().Header.Get(echo.HeaderAuthorization)
			if !a.IsAdmin(h) {
				return unauthorized("invalid_admin_token", h)
			}
			return next(c)
		}
	}
}

// TenantOf is the tenant the tenant middleware set, or "" on a route
// without it.
func TenantOf(c echo.Context) string {
	s, _ := c.Get(TenantContextKey).(string)
	return s
}

// unauthorized is the 401 of a missing or wrong key, in OpenAI's words.
// It never echoes the key back.
func unauthorized(code, authorization string) *apierror.Error {
	msg := "Incorrect API key provided."
	if authorization == "" {
		msg = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
	}
	if code == "invalid_admin_token" {
		msg = "The admin API needs the admin token: Authorization: Bearer <admin token>."
	}
	return apierror.New(http.StatusUnauthorized, code, "%s", msg).WithHeader("Www-Authenticate", "Bearer")
}
