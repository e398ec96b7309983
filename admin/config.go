package admin

import (
	"errors"
	"fmt"
	"strings"

	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Prefixes of a key reference in the config file.
const (
	// KeyRefHash names a key by the hex SHA-256 of its secret.
	KeyRefHash = auth.HashPrefix
	// KeyRefEnv names the environment variable holding the secret.
	KeyRefEnv = "env:"
)

// Config is the tenancy part of the config file:
//
//	adminToken: sha256:5e88…   # or the token itself; or TURNPIKE_ADMIN_TOKEN
//	tenants:
//	  - name: acme
//	    weight: 2
//	    defaultBand: standard
//	    maxBand: interactive
//	    quota: {requestsPerMinute: 600, tokensPerMinute: 2000000, concurrent: 32}
//	    keys: [sha256:9f86d081…, env:ACME_API_KEY]
type Config struct {
	// AdminToken guards /admin/v1: the bearer token itself, or
	// "sha256:<hex>" of it so that the file need not hold the secret.
	// auth.AdminTokenEnv, when set, replaces it (see ApplyEnv). Default "": the
	// admin API is disabled.
	AdminToken string `yaml:"adminToken" json:"-"`
	// Tenants are tenants defined by the file, read-only through the API.
	// Default none: with no tenant here or in the state store the gateway
	// runs open, every request as tenant "default".
	Tenants []TenantConfig `yaml:"tenants" json:"tenants"`
}

// TenantConfig is one tenant of the config file.
type TenantConfig struct {
	// Tenant holds the name, weight, bands and quota, with turns' defaults
	// (weight 1, default band standard, maximum band interactive, no quota).
	turns.Tenant `yaml:",inline"`
	// Keys are the tenant's API keys, each "sha256:<64 hex digits>" (the
	// SHA-256 of the secret) or "env:NAME" (the secret is in environment
	// variable NAME). Default none; more can be added through the API.
	Keys []string `yaml:"keys" json:"-"`
}

// ApplyEnv lets auth.AdminTokenEnv, read through getenv (os.Getenv),
// replace AdminToken.
func (c *Config) ApplyEnv(getenv func(string) string) {
	if v := getenv(auth.AdminTokenEnv); v != "" {
		c.AdminToken = v
	}
}

// EnsureDefaults fills each tenant's zero fields with turns' defaults.
func (c *Config) EnsureDefaults() {
	for i := range c.Tenants {
		c.Tenants[i].EnsureDefaults()
	}
}

// Validate reports every problem at once. Call it after EnsureDefaults.
// Keys given as env: are checked for form here and resolved by New.
func (c *Config) Validate() error {
	var errs []error
	if strings.HasPrefix(c.AdminToken, KeyRefHash) {
		if _, err := auth.ParseKeyHash(c.AdminToken); err != nil {
			errs = append(errs, fmt.Errorf("admin: adminToken: %w", err))
		}
	}
	ts := make([]turns.Tenant, len(c.Tenants))
	for i, tc := range c.Tenants {
		ts[i] = tc.Tenant
		if err := checkName(tc.Name); err != nil && tc.Name != "" {
			errs = append(errs, fmt.Errorf("admin: tenants[%d].name: %w", i, err))
		}
		for j, ref := range tc.Keys {
			if _, _, err := parseKeyRef(ref); err != nil {
				errs = append(errs, fmt.Errorf("admin: tenants[%d].keys[%d]: %w", i, j, err))
			}
		}
	}
	if err := turns.ValidateTenants(ts); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// parseKeyRef parses a key reference of the config file: it returns the
// hash for "sha256:", or the variable's name for "env:".
func parseKeyRef(ref string) (h auth.KeyHash, env string, err error) {
	switch {
	case strings.HasPrefix(ref, KeyRefHash):
		h, err = auth.ParseKeyHash(ref)
		return h, "", err
	case strings.HasPrefix(ref, KeyRefEnv):
		env = strings.TrimPrefix(ref, KeyRefEnv)
		if env == "" {
			return h, "", errors.New(`"env:" names no variable`)
		}
		return h, env, nil
	}
	return h, "", fmt.Errorf("want %q or %q, a key itself does not belong in the file", KeyRefHash+"<hex>", KeyRefEnv+"NAME")
}

// checkName allows tenant names that are safe in a URL path, a store key
// and a metric label, and refuses auth.DefaultTenant: that name owns what
// was stored while the gateway ran open, which a tenant made later must
// not read.
func checkName(name string) error {
	if name == "" {
		return errors.New("required")
	}
	if name == auth.DefaultTenant {
		return fmt.Errorf("%q is reserved: it is the tenant of every request while the gateway runs open, and what was stored then stays its own", name)
	}
	if len(name) > 64 {
		return fmt.Errorf("%d characters, more than 64", len(name))
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '-' || r == '_' || r == '.')
		if !ok {
			return fmt.Errorf("%q: use letters, digits, and - _ . after the first", name)
		}
	}
	return nil
}
