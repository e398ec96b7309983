package admin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/internal/wait"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Sources of a tenant or key.
const (
	SourceAPI    = "api"
	SourceConfig = "config"
)

// keyShown is how many leading characters of a key the API shows after
// creating it: enough to tell keys apart, far too few to guess the rest.
const keyShown = len(auth.KeyPrefix) + 5

// KeyPublisher receives the key snapshot after every change:
// *auth.Authenticator, which the gateway asks. SetKeys takes ownership of
// tenants and must not modify it.
type KeyPublisher interface {
	// SetKeys publishes the tenant of every key hash. open means there are
	// no tenants at all, so the gateway should not ask for keys.
	SetKeys(open bool, tenants map[auth.KeyHash]string)
}

// FlowController is what the Service needs of flow control;
// *turns.Controller implements it.
type FlowController interface {
	Config() turns.FlowControl
	SetConfig(turns.FlowControl) error
	SetTenants([]turns.Tenant) error
}

// Sessions is what the Service needs of the session store;
// *sessions.Store implements it.
type Sessions interface {
	Get(tenant, key string, now time.Time) (sessions.State, bool)
	Unpin(ctx context.Context, tenant, key string, reason sessions.PinReason, now time.Time) (bool, error)
}

// Keys of the Store namespace.
const (
	kvTenantPrefix = "tenants/" // + name → Tenant as JSON
	kvKeyPrefix    = "keys/"    // + key id → storedKey as JSON
	kvFlowControl  = "flowcontrol"
	// kvVersion changes with every change made through the API, so that
	// other gateways sharing the store know to read it again (Refresh).
	kvVersion = "version"
)

// DefaultRefreshInterval is how often a gateway sharing its store with
// others should Refresh (Deps.RefreshInterval).
const DefaultRefreshInterval = 500 * time.Millisecond

// lendScheduleInterval is how often Start's loop looks for a scheduled
// lending window to open (ApplyLendSchedules): each opens within a second
// of its start.
const lendScheduleInterval = time.Second

// Deps are what New needs.
type Deps struct {
	// Store persists tenants, hashed keys and the flowControl override:
	// the admin namespace of the state store. Required.
	Store state.Namespace
	// Keys receives the key snapshot on start and after every change.
	// Required.
	Keys KeyPublisher
	// Flow is flow control, given the tenants on start and after every
	// change. Nil: the flowcontrol and bands routes answer 501.
	Flow FlowController
	// Registry is the fleet. Nil: no pools or endpoints to show.
	Registry *pools.Registry
	// Sessions is the session store. Nil: the session routes answer 501.
	Sessions Sessions
	// Revisions is the models' revision policies (canary weights), which
	// the revisions routes read and change. Nil: they answer 501.
	Revisions Revisions
	// CacheAccuracy reads an endpoint's account of the cached tokens
	// routing predicted for its turns against those its engine reported.
	// Nil: endpoints show none.
	CacheAccuracy func(*pools.Endpoint) (EndpointCache, bool)
	// Metrics registers the lending metrics of lendable pools; nil
	// registers none.
	Metrics prometheus.Registerer
	// Config is the config file's tenancy section, defaults filled.
	Config Config
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Getenv resolves "env:" key references; nil means os.Getenv.
	Getenv func(string) string
	// Now; nil means time.Now.
	Now func() time.Time
	// RefreshInterval is how often the loop Start starts reads the
	// changes other gateways on the same store made (Refresh): a gateway
	// sharing its store (Redis) sets DefaultRefreshInterval. Zero: never,
	// for a gateway alone on its store.
	RefreshInterval time.Duration
}

// Tenant is a tenant as the API shows and the store keeps it.
type Tenant struct {
	turns.Tenant
	// Source is "config" for a tenant of the config file, "api" otherwise.
	Source string `json:"source"`
	// CreatedAt and UpdatedAt are zero for a tenant of the config file.
	CreatedAt time.Time `json:"createdAt,omitzero"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// APIKey is an API key as the API shows it: never its secret.
type APIKey struct {
	// ID names the key in the API ("key_…", or "cfg_…" for a key of the
	// config file).
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Name is a label given when the key was created; may be empty.
	Name string `json:"name,omitempty"`
	// Prefix is the secret's first characters; empty for a config key.
	Prefix    string    `json:"prefix,omitempty"`
	Source    string    `json:"source"`
	CreatedAt time.Time `json:"createdAt,omitzero"`

	hash auth.KeyHash
}

// storedKey is an API key as the store keeps it.
type storedKey struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	Prefix    string    `json:"prefix"`
	CreatedAt time.Time `json:"createdAt"`
	Hash      string    `json:"hash"` // "sha256:<hex>"
}

// Service is the admin API's state and operations. Create it with New,
// which loads and publishes the tenancy, and mount it with Register; Start
// starts its loops, Close stops them.
type Service struct {
	deps Deps
	log  *slog.Logger
	now  func() time.Time
	// stop ends the loops Start starts; loops joins them.
	stop  context.CancelFunc
	loops sync.WaitGroup
	// fileFlow is flow control as the config file set it, restored when
	// the API's override is deleted. Written under mu (Reload), as is
	// deps.Config.
	fileFlow turns.FlowControl
	// config is what GET /config answers; nil until the assembly sets it.
	config atomic.Pointer[ConfigStatus]

	mu struct {
		sync.Mutex
		// protects the fields below; held across store writes and
		// publishes, so both happen in one order.
		tenants      map[string]Tenant
		keys         map[string]APIKey // by ID
		flowOverride bool              // a flowControl saved through the API is in force
		version      string            // kvVersion as last read or written here
	}
}

// New loads the tenancy from the store and the config file and publishes
// it to deps.Keys and deps.Flow, and applies a saved flowControl.
func New(ctx context.Context, deps Deps) (*Service, error) {
	if deps.Store == nil || deps.Keys == nil {
		return nil, errors.New("admin: Store and Keys are required")
	}
	s := &Service{deps: deps, log: cmp.Or(deps.Logger, slog.Default()), now: deps.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if s.deps.Getenv == nil {
		s.deps.Getenv = os.Getenv
	}
	if s.deps.Flow != nil {
		s.fileFlow = s.deps.Flow.Config()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(ctx); err != nil {
		return nil, err
	}
	if err := s.publishLocked(); err != nil {
		return nil, err
	}
	if err := s.registerLendMetrics(); err != nil {
		return nil, err
	}
	// An empty tenancy is the open gateway, which the authenticator
	// announces itself.
	if len(s.mu.tenants) > 0 {
		s.log.Info("admin: tenancy loaded", "tenants", len(s.mu.tenants), "keys", len(s.mu.keys))
	}
	return s, nil
}

// Start starts what runs beside the API until Close, whatever becomes of
// ctx: the refresh of the changes other gateways on the same store make
// (Refresh, every Deps.RefreshInterval, when set), and the lending of the
// pools lent on a schedule (ApplyLendSchedules, once now and then every
// second, when a pool has a schedule). Failures are logged, and the loops
// go on. It is called once.
func (s *Service) Start(ctx context.Context) error {
	if s.stop != nil {
		return errors.New("admin: already started")
	}
	run, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	if d := s.deps.RefreshInterval; d > 0 {
		s.loops.Go(func() {
			every(run, d, func() {
				if _, err := s.Refresh(run); err != nil && run.Err() == nil {
					s.log.Warn("admin: reading other gateways' changes failed", "err", err)
				}
			})
		})
	}
	if s.HasLendSchedules() {
		apply := func() {
			if err := s.ApplyLendSchedules(run); err != nil && run.Err() == nil {
				s.log.Warn("admin: lending on schedule failed", "err", err)
			}
		}
		apply()
		s.loops.Go(func() { every(run, lendScheduleInterval, apply) })
	}
	return nil
}

// Close stops the loops Start started and waits for them, up to ctx.
func (s *Service) Close(ctx context.Context) error {
	if s.stop == nil {
		return nil
	}
	s.stop()
	if err := wait.Group(ctx, &s.loops); err != nil {
		return fmt.Errorf("admin: close: %w", err)
	}
	return nil
}

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// loadLocked reads the store, then lays the config file's tenants and keys
// over it. Keys of a tenant that no longer exists are deleted, so that a
// tenant created later under the same name cannot inherit them.
func (s *Service) loadLocked(ctx context.Context) error {
	// The version first: a change committed during the reads below is
	// seen now or at the next Refresh, never missed.
	version, err := s.readVersion(ctx)
	if err != nil {
		return err
	}
	cfg := s.deps.Config
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	tenants := make(map[string]Tenant)
	keys := make(map[string]APIKey)
	err = s.deps.Store.Scan(ctx, state.Prefix([]byte(kvTenantPrefix)), func(k, v []byte) error {
		var t Tenant
		if err := json.Unmarshal(v, &t); err != nil {
			return fmt.Errorf("admin: stored tenant %q: %w", k, err)
		}
		t.Source = SourceAPI
		tenants[t.Name] = t
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for i, tc := range cfg.Tenants {
		if _, ok := tenants[tc.Name]; ok {
			s.log.Warn("admin: tenant of the config file replaces the one saved through the API", "tenant", tc.Name)
		}
		tenants[tc.Name] = Tenant{Tenant: tc.Tenant, Source: SourceConfig}
		for j, ref := range tc.Keys {
			h, env, _ := parseKeyRef(ref) // Validate checked the form
			if env != "" {
				secret := s.deps.Getenv(env)
				if secret == "" {
					errs = append(errs, fmt.Errorf("admin: tenants[%d].keys[%d]: environment variable %s is not set", i, j, env))
					continue
				}
				h = auth.HashKey(secret)
			}
			id := "cfg_" + hex.EncodeToString(h[:6])
			if _, dup := keys[id]; dup {
				errs = append(errs, fmt.Errorf("admin: tenants[%d].keys[%d]: the same key is listed twice", i, j))
				continue
			}
			keys[id] = APIKey{ID: id, Tenant: tc.Name, Source: SourceConfig, hash: h}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var orphans []string
	err = s.deps.Store.Scan(ctx, state.Prefix([]byte(kvKeyPrefix)), func(k, v []byte) error {
		var sk storedKey
		if err := json.Unmarshal(v, &sk); err != nil {
			return fmt.Errorf("admin: stored key %q: %w", k, err)
		}
		h, err := auth.ParseKeyHash(sk.Hash)
		if err != nil {
			return fmt.Errorf("admin: stored key %q: %w", k, err)
		}
		if _, ok := tenants[sk.Tenant]; !ok {
			orphans = append(orphans, string(k))
			return nil
		}
		keys[sk.ID] = APIKey{ID: sk.ID, Tenant: sk.Tenant, Name: sk.Name, Prefix: sk.Prefix, Source: SourceAPI, CreatedAt: sk.CreatedAt, hash: h}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range orphans {
		s.log.Warn("admin: deleting a key whose tenant no longer exists", "key", strings.TrimPrefix(k, kvKeyPrefix))
		if err := s.deps.Store.Delete(ctx, []byte(k)); err != nil {
			return err
		}
	}
	s.mu.tenants, s.mu.keys, s.mu.version = tenants, keys, version
	if err := s.loadLeasesLocked(ctx); err != nil {
		return err
	}
	return s.loadFlowControlLocked(ctx)
}

// readVersion is kvVersion, "" when none was written.
func (s *Service) readVersion(ctx context.Context) (string, error) {
	v, err := s.deps.Store.Get(ctx, []byte(kvVersion))
	if errors.Is(err, state.ErrNotFound) {
		return "", nil
	}
	return string(v), err
}

// changedLocked records that a change was written: a new kvVersion for
// the other gateways, which this one has already applied. A change is
// written before its version, so a gateway that sees the version reads
// the change.
func (s *Service) changedLocked(ctx context.Context) error {
	var v [12]byte
	rand.Read(v[:])
	version := hex.EncodeToString(v[:])
	if err := s.deps.Store.Put(ctx, []byte(kvVersion), []byte(version)); err != nil {
		return err
	}
	s.mu.version = version
	return nil
}

// Refresh reads the tenancy and the saved flowControl again and publishes
// them when another gateway sharing the store has changed them since this
// one last looked; it reports whether it did.
func (s *Service) Refresh(ctx context.Context) (bool, error) {
	version, err := s.readVersion(ctx)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if version == s.mu.version {
		return false, nil
	}
	if err := s.loadLocked(ctx); err != nil {
		return false, err
	}
	if err := s.publishLocked(); err != nil {
		return false, err
	}
	s.log.Info("admin: tenancy changed by another gateway, applied", "tenants", len(s.mu.tenants), "keys", len(s.mu.keys))
	return true, nil
}

// loadFlowControlLocked applies a flowControl saved through the API, or
// the file's when none is saved (any more). One that no longer validates
// is left in the store and not applied: the gateway keeps the file's, and
// says so.
func (s *Service) loadFlowControlLocked(ctx context.Context) error {
	if s.deps.Flow == nil {
		return nil
	}
	b, err := s.deps.Store.Get(ctx, []byte(kvFlowControl))
	if errors.Is(err, state.ErrNotFound) {
		if s.mu.flowOverride {
			s.mu.flowOverride = false
			return s.deps.Flow.SetConfig(s.fileFlow)
		}
		return nil
	}
	if err != nil {
		return err
	}
	var fc turns.FlowControl
	if err := yaml.Unmarshal(b, &fc); err != nil {
		s.log.Error("admin: saved flowControl is unreadable; using the config file's", "err", err)
		return nil
	}
	if err := s.deps.Flow.SetConfig(fc); err != nil {
		s.log.Error("admin: saved flowControl is invalid; using the config file's", "err", err)
		return nil
	}
	s.mu.flowOverride = true
	s.log.Info("admin: flowControl saved through the API overrides the config file's")
	return nil
}

// publishLocked hands the key snapshot to the authenticator and the
// tenants to flow control. It builds new values every time: the published
// ones are immutable.
func (s *Service) publishLocked() error {
	byHash := make(map[auth.KeyHash]string, len(s.mu.keys))
	for _, k := range s.mu.keys {
		byHash[k.hash] = k.Tenant
	}
	if s.deps.Flow != nil {
		ts := make([]turns.Tenant, 0, len(s.mu.tenants))
		for _, t := range s.sortedTenantsLocked() {
			ts = append(ts, t.Tenant)
		}
		if err := s.deps.Flow.SetTenants(ts); err != nil {
			return fmt.Errorf("admin: publishing tenants: %w", err)
		}
	}
	s.deps.Keys.SetKeys(len(s.mu.tenants) == 0, byHash)
	return nil
}

func (s *Service) sortedTenantsLocked() []Tenant {
	return slices.SortedFunc(maps.Values(s.mu.tenants), func(a, b Tenant) int { return strings.Compare(a.Name, b.Name) })
}

// Tenants lists the tenants by name.
func (s *Service) Tenants() []Tenant {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sortedTenantsLocked()
}

// Tenant returns the named tenant.
func (s *Service) Tenant(name string) (Tenant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tenantLocked(name)
}

func (s *Service) tenantLocked(name string) (Tenant, error) {
	t, ok := s.mu.tenants[name]
	if !ok {
		return Tenant{}, notFoundf("tenant", "tenant_not_found", "No tenant named %q.", name)
	}
	return t, nil
}

// checkTenant fills t's defaults and reports its first problem.
func checkTenant(t *turns.Tenant) error {
	if err := checkName(t.Name); err != nil {
		return invalidf("name", "name: %v", err)
	}
	t.EnsureDefaults()
	if err := turns.ValidateTenants([]turns.Tenant{*t}); err != nil {
		return validationError(err, "tenants[0].")
	}
	return nil
}

// CreateTenant adds a tenant, with turns' defaults for its zero fields.
func (s *Service) CreateTenant(ctx context.Context, tt turns.Tenant) (Tenant, error) {
	if err := checkTenant(&tt); err != nil {
		return Tenant{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.mu.tenants[tt.Name]; ok {
		return Tenant{}, apierror.Conflict("name", "tenant_exists", "A tenant named %q exists already.", tt.Name).WithClass(ErrExists)
	}
	now := s.now().UTC()
	t := Tenant{Tenant: tt, Source: SourceAPI, CreatedAt: now, UpdatedAt: now}
	if err := s.putTenantLocked(ctx, t); err != nil {
		return Tenant{}, err
	}
	s.log.Info("admin: tenant created", "tenant", t.Name)
	return t, nil
}

// UpdateTenant changes the named tenant with change, which may modify
// every field but the name. It runs under the Service's lock.
func (s *Service) UpdateTenant(ctx context.Context, name string, change func(*turns.Tenant) error) (Tenant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.tenantLocked(name)
	if err != nil {
		return Tenant{}, err
	}
	if t.Source == SourceConfig {
		return Tenant{}, configured("tenant", "Tenant %q is defined in the config file; change it there.", name)
	}
	if err := change(&t.Tenant); err != nil {
		return Tenant{}, err
	}
	if t.Name != name {
		return Tenant{}, invalidf("name", "A tenant cannot be renamed; create a new one.")
	}
	if err := checkTenant(&t.Tenant); err != nil {
		return Tenant{}, err
	}
	t.UpdatedAt = s.now().UTC()
	if err := s.putTenantLocked(ctx, t); err != nil {
		return Tenant{}, err
	}
	s.log.Info("admin: tenant updated", "tenant", t.Name)
	return t, nil
}

func (s *Service) putTenantLocked(ctx context.Context, t Tenant) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if err := s.deps.Store.Put(ctx, []byte(kvTenantPrefix+t.Name), b); err != nil {
		return err
	}
	s.mu.tenants[t.Name] = t
	if err := s.changedLocked(ctx); err != nil {
		return err
	}
	return s.publishLocked()
}

// DeleteTenant removes the named tenant and revokes its keys.
func (s *Service) DeleteTenant(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.tenantLocked(name)
	if err != nil {
		return err
	}
	if t.Source == SourceConfig {
		return configured("tenant", "Tenant %q is defined in the config file; remove it there.", name)
	}
	// Keys go first: a crash half-way leaves a tenant with fewer keys,
	// never keys without their tenant.
	for id, k := range s.mu.keys {
		if k.Tenant != name {
			continue
		}
		if err := s.deps.Store.Delete(ctx, []byte(kvKeyPrefix+id)); err != nil {
			return err
		}
		delete(s.mu.keys, id)
	}
	if err := s.deps.Store.Delete(ctx, []byte(kvTenantPrefix+name)); err != nil {
		return err
	}
	delete(s.mu.tenants, name)
	s.log.Info("admin: tenant deleted", "tenant", name)
	if err := s.changedLocked(ctx); err != nil {
		return err
	}
	return s.publishLocked()
}

// Keys lists the tenant's keys, oldest first.
func (s *Service) Keys(tenant string) ([]APIKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.tenantLocked(tenant); err != nil {
		return nil, err
	}
	var out []APIKey
	for _, k := range s.mu.keys {
		if k.Tenant == tenant {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b APIKey) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// CreateKey makes a new key for tenant and returns it with its secret,
// which is not kept and cannot be shown again.
func (s *Service) CreateKey(ctx context.Context, tenant, name string) (APIKey, string, error) {
	if len(name) > 128 {
		return APIKey{}, "", invalidf("name", "name: %d characters, more than 128.", len(name))
	}
	secret := auth.NewSecret()
	var id [8]byte
	rand.Read(id[:])
	k := APIKey{
		ID:        "key_" + hex.EncodeToString(id[:]),
		Tenant:    tenant,
		Name:      name,
		Prefix:    secret[:keyShown],
		Source:    SourceAPI,
		CreatedAt: s.now().UTC(),
		hash:      auth.HashKey(secret),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.tenantLocked(tenant); err != nil {
		return APIKey{}, "", err
	}
	b, err := json.Marshal(storedKey{ID: k.ID, Tenant: k.Tenant, Name: k.Name, Prefix: k.Prefix, CreatedAt: k.CreatedAt, Hash: k.hash.String()})
	if err != nil {
		return APIKey{}, "", err
	}
	if err := s.deps.Store.Put(ctx, []byte(kvKeyPrefix+k.ID), b); err != nil {
		return APIKey{}, "", err
	}
	s.mu.keys[k.ID] = k
	if err := s.changedLocked(ctx); err != nil {
		return APIKey{}, "", err
	}
	if err := s.publishLocked(); err != nil {
		return APIKey{}, "", err
	}
	s.log.Info("admin: key created", "tenant", tenant, "key", k.ID)
	return k, secret, nil
}

// RevokeKey deletes the tenant's key id; requests with it fail from now on.
func (s *Service) RevokeKey(ctx context.Context, tenant, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.tenantLocked(tenant); err != nil {
		return err
	}
	k, ok := s.mu.keys[id]
	if !ok || k.Tenant != tenant {
		return notFoundf("key", "key_not_found", "Tenant %q has no key %q.", tenant, id)
	}
	if k.Source == SourceConfig {
		return configured("key", "Key %q is defined in the config file; remove it there.", id)
	}
	if err := s.deps.Store.Delete(ctx, []byte(kvKeyPrefix+id)); err != nil {
		return err
	}
	delete(s.mu.keys, id)
	s.log.Info("admin: key revoked", "tenant", tenant, "key", id)
	if err := s.changedLocked(ctx); err != nil {
		return err
	}
	return s.publishLocked()
}

// FlowControl returns the flowControl in force, and whether it is one
// saved through the API rather than the config file's.
func (s *Service) FlowControl() (turns.FlowControl, bool, error) {
	if s.deps.Flow == nil {
		return turns.FlowControl{}, false, unavailable("flow control")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deps.Flow.Config(), s.mu.flowOverride, nil
}

// SetFlowControl validates fc (zero fields take the defaults), saves it
// and puts it in force at once.
func (s *Service) SetFlowControl(ctx context.Context, fc turns.FlowControl) error {
	if s.deps.Flow == nil {
		return unavailable("flow control")
	}
	fc.EnsureDefaults()
	if err := fc.Validate(); err != nil {
		return validationError(err, "flowControl.")
	}
	b, err := yaml.Marshal(fc)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.deps.Store.Put(ctx, []byte(kvFlowControl), b); err != nil {
		return err
	}
	if err := s.changedLocked(ctx); err != nil {
		return err
	}
	s.mu.flowOverride = true
	s.log.Info("admin: flowControl replaced")
	return s.deps.Flow.SetConfig(fc)
}

// ResetFlowControl deletes the flowControl saved through the API and puts
// the config file's back in force.
func (s *Service) ResetFlowControl(ctx context.Context) error {
	if s.deps.Flow == nil {
		return unavailable("flow control")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.deps.Store.Delete(ctx, []byte(kvFlowControl)); err != nil {
		return err
	}
	if err := s.changedLocked(ctx); err != nil {
		return err
	}
	s.mu.flowOverride = false
	s.log.Info("admin: flowControl reset to the config file's")
	return s.deps.Flow.SetConfig(s.fileFlow)
}

var (
	_ KeyPublisher   = (*auth.Authenticator)(nil)
	_ FlowController = (*turns.Controller)(nil)
	_ Sessions       = (*sessions.Store)(nil)
)
