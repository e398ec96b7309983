package gateway

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/apierror"
)

// Tenancy names.
const (
	// TenantContextKey is the echo.Context key under which the tenant
	// middleware stores the request's tenant name; read it with TenantOf.
	TenantContextKey = "tenant"
	// DefaultTenant is the tenant of every request while the gateway runs
	// open, with no tenants defined.
	DefaultTenant = "default"
)

// maxKeyLen bounds the bearer token the gateway will hash: no key is this
// long, and hashing whatever a client sends would be work for free.
const maxKeyLen = 256

// AuthOptions configure an Auth.
type AuthOptions struct {
	// AdminToken guards /admin/v1: the token itself, or "sha256:<hex>" of
	// it (admin.Config.AdminToken). Empty disables the admin API: its
	// routes answer 404.
	AdminToken string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Auth is the gateway's authentication: which tenant an API key belongs
// to, and whether a request may use the admin API. Create it with NewAuth;
// the admin Service publishes the keys into it (it is an
// admin.KeyPublisher). Until then every public request is refused.
type Auth struct {
	log *slog.Logger
	// keys is read on every request and replaced, never modified, on every
	// change of tenants or keys.
	keys atomic.Pointer[keySnapshot]
	// admin is the SHA-256 of the admin token; set only when adminOn.
	admin   admin.KeyHash
	adminOn bool
}

// keySnapshot is an immutable view of the keys.
type keySnapshot struct {
	// open: there are no tenants; every request is DefaultTenant.
	open    bool
	tenants map[admin.KeyHash]string
}

// NewAuth returns an Auth that refuses every public request until SetKeys.
func NewAuth(opts AuthOptions) (*Auth, error) {
	a := &Auth{log: opts.Logger}
	if a.log == nil {
		a.log = slog.Default()
	}
	switch tok := opts.AdminToken; {
	case tok == "":
		a.log.Info("admin API disabled: no admin token (set " + admin.AdminTokenEnv + " or adminToken)")
	case strings.HasPrefix(tok, admin.KeyRefHash):
		h, err := admin.ParseKeyHash(tok)
		if err != nil {
			return nil, fmt.Errorf("gateway: admin token: %w", err)
		}
		a.admin, a.adminOn = h, true
	default:
		a.admin, a.adminOn = admin.HashKey(tok), true
	}
	a.keys.Store(&keySnapshot{})
	return a, nil
}

// SetKeys publishes a new key snapshot; it implements admin.KeyPublisher.
// It takes ownership of tenants. A change between open and keyed is
// logged, since it changes who may call the gateway.
func (a *Auth) SetKeys(open bool, tenants map[admin.KeyHash]string) {
	old := a.keys.Swap(&keySnapshot{open: open, tenants: tenants})
	switch {
	case open && (old == nil || !old.open):
		a.log.Warn("auth: no tenants defined, running open: every request is tenant \"" + DefaultTenant + "\" and no API key is checked")
	case !open && old != nil && old.open:
		a.log.Info("auth: tenants defined, API keys required", "keys", len(tenants))
	}
}

// AdminEnabled reports whether an admin token is configured.
func (a *Auth) AdminEnabled() bool { return a.adminOn }

// Authenticate returns the tenant of an Authorization header's value, or
// false when the gateway requires a key and this is none of its keys. It
// is on every request's path and does not allocate.
func (a *Auth) Authenticate(authorization string) (tenant string, ok bool) {
	ks := a.keys.Load()
	if ks.open {
		return DefaultTenant, true
	}
	key, ok := bearer(authorization)
	if !ok {
		return "", false
	}
	tenant, ok = ks.tenants[admin.HashKey(key)]
	return tenant, ok
}

// Tenants is the middleware of the public API: it sets the request's
// tenant (TenantOf) or answers 401 invalid_api_key.
func (a *Auth) Tenants() echo.MiddlewareFunc {
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

// Admin is the middleware of /admin/v1. With no admin token it answers
// 404, as for a route that does not exist: an API that cannot be opened
// should not invite anyone to guess its token. Otherwise a request
// without the admin token, a tenant's key included, gets 401.
func (a *Auth) Admin() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !a.adminOn {
				return echo.ErrNotFound
			}
			h := c.Request().Header.Get(echo.HeaderAuthorization)
			tok, ok := bearer(h)
			if !ok {
				return unauthorized("invalid_admin_token", h)
			}
			// Comparing digests keeps the comparison constant-time in the
			// token's length too, which ConstantTimeCompare alone is not.
			got := admin.HashKey(tok)
			if subtle.ConstantTimeCompare(got[:], a.admin[:]) != 1 {
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

// bearer returns the token of "Bearer <token>" (the scheme in any case).
func bearer(h string) (string, bool) {
	const scheme = "Bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(scheme):])
	if tok == "" || len(tok) > maxKeyLen {
		return "", false
	}
	return tok, true
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

var _ admin.KeyPublisher = (*Auth)(nil)
