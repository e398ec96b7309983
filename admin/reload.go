package admin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/turnpike-gateway/turnpike/turns"
)

// Reload results, the result of a ConfigReload.
const (
	ReloadSuccess = "success"
	ReloadFailure = "failure"
)

// ConfigStatus is what GET /admin/v1/config answers: the config the
// gateway runs, secrets redacted, and how its last reload went. The
// assembly, which reads the file, hands it down (SetConfigStatus) after it
// starts and after every reload.
type ConfigStatus struct {
	// APIVersion is the running config's apiVersion.
	APIVersion string `json:"apiVersion"`
	// Path is the config file; "" when the gateway runs without one.
	Path string `json:"path,omitempty"`
	// Config is the running config, keyed as the file is, secrets
	// redacted.
	Config map[string]any `json:"config"`
	// LoadedAt is when the running config was loaded, at start or by the
	// last reload that succeeded.
	LoadedAt time.Time `json:"loadedAt"`
	// LastReload is the last reload's result; nil before the first.
	LastReload *ConfigReload `json:"lastReload,omitempty"`
}

// ConfigReload is one reload's result.
type ConfigReload struct {
	// At is when it was tried.
	At time.Time `json:"at"`
	// Trigger is what asked for it: signal (SIGHUP) or file (a change of
	// the config file).
	Trigger string `json:"trigger"`
	// Result is ReloadSuccess or ReloadFailure; after a failure the
	// running config is the one before.
	Result string `json:"result"`
	// Problems are every problem of a refused file, one a line.
	Problems []string `json:"problems,omitempty"`
	// NeedsRestart names the settings the file changes that take effect
	// only at the next start; the running ones are kept.
	NeedsRestart []string `json:"needsRestart,omitempty"`
}

// SetConfigStatus replaces what GET /admin/v1/config answers. st is the
// Service's from then on; the caller must not modify it.
func (s *Service) SetConfigStatus(st *ConfigStatus) { s.config.Store(st) }

func (s *Service) getConfig(c echo.Context) error {
	st := s.config.Load()
	if st == nil {
		return unavailable("the running config")
	}
	return c.JSON(http.StatusOK, st)
}

// Reload lays a reloaded config file's tenancy and flow control over what
// runs: the file's tenants and keys replace the file's before (tenants and
// keys made through the API stay), and cfg's flowControl becomes the
// file's, in force at once unless one saved through the API overrides it.
// cfg's AdminToken is not read: the token is the authenticator's, set at
// start. On an error (a key's environment variable unset, say) nothing
// changes.
func (s *Service) Reload(ctx context.Context, cfg Config, fileFlow turns.FlowControl) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	oldCfg, oldFlow := s.deps.Config, s.fileFlow
	s.deps.Config, s.fileFlow = cfg, fileFlow
	if err := s.loadLocked(ctx); err != nil {
		s.deps.Config, s.fileFlow = oldCfg, oldFlow
		return err
	}
	if s.deps.Flow != nil && !s.mu.flowOverride {
		if err := s.deps.Flow.SetConfig(fileFlow); err != nil {
			s.deps.Config, s.fileFlow = oldCfg, oldFlow
			return fmt.Errorf("admin: reload: %w", err)
		}
	}
	if err := s.publishLocked(); err != nil {
		return err
	}
	if s.mu.flowOverride {
		s.log.Warn("admin: the config file's flowControl was reloaded, but the one saved through the API stays in force until it is deleted")
	}
	return nil
}
