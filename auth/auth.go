package auth

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
)

// DefaultTenant is the tenant of every request while the gateway runs
// open, with no tenants defined.
const DefaultTenant = "default"

// MaxKeyLen bounds the bearer token an Authenticator will hash: no key is
// this long, and hashing whatever a client sends would be work for free.
const MaxKeyLen = 256

// Options configure an Authenticator.
type Options struct {
	// AdminToken guards the admin API: the token itself, or
	// "sha256:<hex>" of it. Empty disables the admin API: IsAdmin is false
	// for every request.
	AdminToken string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Authenticator says which tenant an API key belongs to and whether a
// request carries the admin token. Create it with New; the admin API
// publishes the keys into it with SetKeys. Until then every public request
// is refused.
type Authenticator struct {
	log *slog.Logger
	// keys is read on every request and replaced, never modified, on every
	// change of tenants or keys.
	keys atomic.Pointer[keySnapshot]
	// admin is the SHA-256 of the admin token; set only when adminOn.
	admin   KeyHash
	adminOn bool
}

// keySnapshot is an immutable view of the keys.
type keySnapshot struct {
	// open: there are no tenants; every request is DefaultTenant.
	open    bool
	tenants map[KeyHash]string
}

// New returns an Authenticator that refuses every public request until
// SetKeys.
func New(opts Options) (*Authenticator, error) {
	a := &Authenticator{log: opts.Logger}
	if a.log == nil {
		a.log = slog.Default()
	}
	switch tok := opts.AdminToken; {
	case tok == "":
		a.log.Info("admin API disabled: no admin token (set " + AdminTokenEnv + " or adminToken)")
	case strings.HasPrefix(tok, HashPrefix):
		h, err := ParseKeyHash(tok)
		if err != nil {
			return nil, fmt.Errorf("auth: admin token: %w", err)
		}
		a.admin, a.adminOn = h, true
	default:
		a.admin, a.adminOn = HashKey(tok), true
	}
	a.keys.Store(&keySnapshot{})
	return a, nil
}

// SetKeys publishes a new key snapshot: the tenant of every key hash, and
// open when there are no tenants at all, so that no key is asked for. It
// takes ownership of tenants. A change between open and keyed is logged,
// since it changes who may call the gateway.
func (a *Authenticator) SetKeys(open bool, tenants map[KeyHash]string) {
	old := a.keys.Swap(&keySnapshot{open: open, tenants: tenants})
	switch {
	case open && (old == nil || !old.open):
		a.log.Warn("auth: no tenants defined, running open: every request is tenant \"" + DefaultTenant + "\" and no API key is checked")
	case !open && old != nil && old.open:
		a.log.Info("auth: tenants defined, API keys required", "keys", len(tenants))
	}
}

// AdminEnabled reports whether an admin token is configured.
func (a *Authenticator) AdminEnabled() bool { return a.adminOn }

// Authenticate returns the tenant of an Authorization header's value, or
// false when a key is required and this is none of the keys. It is on
// every request's path and does not allocate.
func (a *Authenticator) Authenticate(authorization string) (tenant string, ok bool) {
	ks := a.keys.Load()
	if ks.open {
		return DefaultTenant, true
	}
	key, ok := Bearer(authorization)
	if !ok {
		return "", false
	}
	tenant, ok = ks.tenants[HashKey(key)]
	return tenant, ok
}

// IsAdmin reports whether an Authorization header's value carries the
// admin token; never when the admin API is disabled. A tenant's key is not
// the admin token.
func (a *Authenticator) IsAdmin(authorization string) bool {
	if !a.adminOn {
		return false
	}
	tok, ok := Bearer(authorization)
	if !ok {
		return false
	}
	// Comparing digests keeps the comparison constant-time in the token's
	// length too, which ConstantTimeCompare alone is not.
	got := HashKey(tok)
	return subtle.ConstantTimeCompare(got[:], a.admin[:]) == 1
}

// Bearer returns the token of "Bearer <token>" (the scheme in any case),
// or false for any other value and for a token over MaxKeyLen.
func Bearer(h string) (string, bool) {
	const scheme = "Bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(scheme):])
	if tok == "" || len(tok) > MaxKeyLen {
		return "", false
	}
	return tok, true
}
