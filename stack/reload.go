package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/turnpike-gateway/turnpike/admin"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/internal/filewatch"
	"github.com/turnpike-gateway/turnpike/models"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/state"
)

// Reload triggers, the trigger of a ConfigReload.
const (
	TriggerSignal = "signal"
	TriggerFile   = "file"
)

// configResync is how often the config file is read even when no change
// was notified (filewatch).
const configResync = 10 * time.Second

// reloader is what a reload needs of the running stack. Its mutex
// serialises reloads, and guards the running config against them.
type reloader struct {
	path string
	// adjust lays the command line over a file (Options.Adjust).
	adjust func(*Config)

	// Set by Start.
	policy     *affinity.Reloadable
	policyDeps affinity.Deps
	adm        *admin.Service
	dispatch   *dispatch.Dispatcher
	reloads    *prometheus.CounterVec
	lastGood   prometheus.Gauge
	pending    prometheus.Gauge

	mu struct {
		sync.Mutex
		// protects the fields below and the stack's cfg once started
		// last is the file as last read, good or not.
		last     []byte
		loadedAt time.Time
		status   *admin.ConfigReload
	}
}

func (r *reloader) register(m prometheus.Registerer) {
	r.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turnpike_config_reloads_total",
		Help: "Reloads of the config file, by result (success, failure: the running config kept).",
	}, []string{"result"})
	r.lastGood = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "turnpike_config_last_reload_success_timestamp_seconds",
		Help: "When the running config was loaded: at start, or by the last reload that succeeded (Unix seconds).",
	})
	r.pending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "turnpike_config_restart_pending",
		Help: "1 when the config file changes settings that take effect only at the next start (GET /admin/v1/config names them), else 0.",
	})
	r.reloads.WithLabelValues(admin.ReloadSuccess)
	r.reloads.WithLabelValues(admin.ReloadFailure)
	m.MustRegister(r.reloads, r.lastGood, r.pending)
}

// Reload reads the config file again and applies what may change while
// the gateway runs, without dropping a turn: the endpoints lists of
// static pools, routing (policy, filters, scorers and their weights), flow
// control (bands, TTLs, queue bounds), the file's tenants and keys, and
// the server section. The settings that take effect only at the next
// start are kept as they run and named in the result (NeedsRestart). A
// file with any problem is refused whole, every problem listed, and the
// running config kept. The result is also logged, counted and shown by
// GET /admin/v1/config. Reloads are serialised; Reload may be called from
// any goroutine once Start has returned, and not after Close.
func (s *Stack) Reload(ctx context.Context, trigger string) *admin.ConfigReload {
	r := &s.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &admin.ConfigReload{At: time.Now(), Trigger: trigger, Result: admin.ReloadSuccess}
	b, err := os.ReadFile(r.path)
	if r.path == "" {
		err = errNoConfigFile
	}
	if err == nil {
		r.mu.last = b
		var next *Config
		if next, err = s.nextConfigLocked(b); err == nil {
			res.NeedsRestart = needsRestart(&s.cfg, next)
			next = reloadable(&s.cfg, next)
			err = s.applyLocked(ctx, next)
		}
	}
	if err != nil {
		res.Result, res.Problems = admin.ReloadFailure, problems(err)
		s.log.Error("config reload refused; the running config is kept", "path", r.path, "trigger", trigger, "problems", len(res.Problems))
		for _, p := range res.Problems {
			s.log.Error("config reload problem", "path", r.path, "problem", p)
		}
	} else {
		r.mu.loadedAt = res.At
		r.lastGood.Set(float64(res.At.UnixNano()) / 1e9)
		r.pending.Set(0)
		if len(res.NeedsRestart) > 0 {
			r.pending.Set(1)
			s.log.Warn("config reloaded; some changes need a restart and are not in force", "path", r.path, "needs_restart", strings.Join(res.NeedsRestart, ", "))
		}
		for _, w := range s.cfg.Warnings() {
			s.log.Warn(w, "path", r.path)
		}
		s.log.Info("config reloaded", "path", r.path, "trigger", trigger, "policy", s.cfg.Routing.Policy)
	}
	r.reloads.WithLabelValues(res.Result).Inc()
	r.mu.status = res
	s.publishStatusLocked()
	return res
}

// reloadIfChanged is Reload for a change of the file's directory: a file
// like the last one read, good or bad, is left alone.
func (s *Stack) reloadIfChanged(ctx context.Context) {
	b, err := os.ReadFile(s.reload.path)
	s.reload.mu.Lock()
	same := err == nil && bytes.Equal(b, s.reload.mu.last)
	s.reload.mu.Unlock()
	if !same {
		s.Reload(ctx, TriggerFile)
	}
}

// nextConfigLocked parses a file's contents into the config the stack
// would run: the command line over it, the embedded fleet's pools in
// place of its own, as at Start.
func (s *Stack) nextConfigLocked(b []byte) (*Config, error) {
	next, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if s.reload.adjust != nil {
		s.reload.adjust(next)
	}
	if s.fleet != nil {
		next.Pools = s.cfg.Pools
		s.fleetRouting(next)
	}
	next.Admin.ApplyEnv(os.Getenv)
	next.Routing.TierWeights = catalogTierWeights(next.Routing.TierWeights, next.Pools)
	if err := next.Validate(); err != nil {
		return nil, err
	}
	return next, nil
}

// applyLocked puts next, all of whose changes may be made at runtime, in
// force. What can fail is done first, so that a failure changes nothing:
// the new policy is built, then the tenancy reloaded (a key's environment
// variable may be unset), and only then the rest.
func (s *Stack) applyLocked(ctx context.Context, next *Config) error {
	r := &s.reload
	var policy affinity.Policy
	if !reflect.DeepEqual(s.cfg.Routing.Config, next.Routing.Config) {
		var err error
		if policy, err = affinity.NewPolicy(next.Routing.Config, r.policyDeps); err != nil {
			return fmt.Errorf("routing: %w", err)
		}
	}
	var rewrites *models.Table
	if !reflect.DeepEqual(s.cfg.Models, next.Models) {
		var err error
		if rewrites, err = models.New(next.Models); err != nil {
			return fmt.Errorf("models: %w", err)
		}
	}
	if err := r.adm.Reload(ctx, next.Admin, next.FlowControl); err != nil {
		return err
	}
	if policy != nil {
		r.policy.Set(policy)
	}
	if rewrites != nil {
		r.dispatch.SetModels(rewrites)
	}
	if !reflect.DeepEqual(s.cfg.Routing.Revisions, next.Routing.Revisions) {
		// Validated with the file: Set cannot fail. A model the file no
		// longer lists goes back to the newest revision, whatever the
		// admin API had set.
		revs := r.dispatch.Revisions()
		for model := range s.cfg.Routing.Revisions {
			if _, ok := next.Routing.Revisions[model]; !ok {
				_ = revs.Set(model, affinity.RevisionPolicy{})
			}
		}
		for model, p := range next.Routing.Revisions {
			_ = revs.Set(model, p)
		}
	}
	for i, pc := range next.Pools {
		if !static(&pc) || slices.Equal(pc.Endpoints, s.cfg.Pools[i].Endpoints) {
			continue
		}
		if err := s.reg.SetEndpoints(pc.Name, pc.Endpoints); err != nil {
			// Validated, and the pool is there: a broken invariant.
			panic(fmt.Sprintf("stack: reload: %v", err))
		}
	}
	s.cfg = *next
	return nil
}

// needsRestart names the settings next changes that only a restart puts
// in force, as the file spells them.
func needsRestart(running, next *Config) []string {
	var out []string
	same := func(name string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, name)
		}
	}
	same("addr", running.Addr, next.Addr)
	same("dataDir", running.DataDir, next.DataDir)
	same("state", running.State, next.State)
	same("fleet", running.Fleet, next.Fleet)
	same("sessions", running.Sessions, next.Sessions)
	same("responses", running.Responses, next.Responses)
	same("batch", running.Batch, next.Batch)
	same("bodyLimit", running.BodyLimit, next.BodyLimit)
	same("bodyBudget", running.BodyBudget, next.BodyBudget)
	same("tracing", running.Tracing, next.Tracing)
	same("guard", running.Guard, next.Guard)
	same("runtime", running.Runtime, next.Runtime)
	same("adminToken", running.Admin.AdminToken, next.Admin.AdminToken)
	same("routing.pd", running.Routing.PD, next.Routing.PD)
	same("routing.handOff", running.Routing.HandOff, next.Routing.HandOff)
	same("routing.shareRecords", running.Routing.ShareRecords, next.Routing.ShareRecords)
	same("routing.shareLoad", running.Routing.ShareLoad, next.Routing.ShareLoad)
	same("routing.interactiveLane", running.Routing.InteractiveLane, next.Routing.InteractiveLane)
	same("routing.interactiveLaneHold", running.Routing.InteractiveLaneHold, next.Routing.InteractiveLaneHold)
	if !slices.EqualFunc(running.Pools, next.Pools, func(a, b pools.PoolConfig) bool { return a.Name == b.Name }) {
		return append(out, "pools (added, removed, renamed or reordered)")
	}
	for i := range running.Pools {
		a, b := running.Pools[i], next.Pools[i]
		a.Endpoints, b.Endpoints = nil, nil
		if !static(&a) {
			// A discovered pool has no list, and its source follows its
			// origin itself.
			a.Endpoints, b.Endpoints = running.Pools[i].Endpoints, next.Pools[i].Endpoints
		}
		same("pools["+a.Name+"] (all but a static pool's endpoints)", a, b)
	}
	return out
}

// reloadable is next with every setting that needs a restart as it runs:
// the config a reload puts in force.
func reloadable(running, next *Config) *Config {
	out := *running
	out.APIVersion, out.noVersion = next.APIVersion, next.noVersion
	out.Server = next.Server
	out.FlowControl = next.FlowControl
	out.Models = next.Models
	out.Admin.Tenants = next.Admin.Tenants
	lane, hold := running.Routing.InteractiveLane, running.Routing.InteractiveLaneHold
	out.Routing.Config = next.Routing.Config
	out.Routing.Revisions = next.Routing.Revisions
	out.Routing.InteractiveLane, out.Routing.InteractiveLaneHold = lane, hold
	if slices.EqualFunc(running.Pools, next.Pools, func(a, b pools.PoolConfig) bool { return a.Name == b.Name }) {
		out.Pools = slices.Clone(running.Pools)
		for i, pc := range next.Pools {
			if static(&pc) {
				out.Pools[i].Endpoints = pc.Endpoints
			}
		}
	}
	return &out
}

// static reports whether pc's endpoints are its list, which a reload may
// change.
func static(pc *pools.PoolConfig) bool {
	return pc.Discovery == nil || pc.Discovery.Kind == "" || pc.Discovery.Kind == pools.DiscoveryStatic
}

// problems are err's problems one a line: the leaves of its joins, each
// with the prefixes of the errors that wrap it.
func problems(err error) []string {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		var out []string
		for _, inner := range e.Unwrap() {
			out = append(out, problems(inner)...)
		}
		return out
	case interface{ Unwrap() error }:
		inner := e.Unwrap()
		if inner != nil {
			if prefix, ok := strings.CutSuffix(err.Error(), inner.Error()); ok {
				var out []string
				for _, p := range problems(inner) {
					out = append(out, prefix+p)
				}
				return out
			}
		}
	}
	return strings.Split(err.Error(), "\n")
}

// publishStatusLocked hands GET /admin/v1/config the running config and
// the last reload's result.
func (s *Stack) publishStatusLocked() {
	r := &s.reload
	if r.adm == nil {
		return
	}
	m, err := redacted(&s.cfg)
	if err != nil {
		s.log.Warn("the running config cannot be shown", "err", err)
	}
	r.adm.SetConfigStatus(&admin.ConfigStatus{APIVersion: s.cfg.APIVersion, Path: r.path, Config: m, LoadedAt: r.mu.loadedAt, LastReload: r.mu.status})
}

// redactedValue stands for a secret in the config GET /admin/v1/config
// shows.
const redactedValue = "REDACTED"

// redacted is c keyed as the file is, its secrets replaced: the admin
// token, the tenants' key references, and the passwords of Redis URLs.
func redacted(c *Config) (map[string]any, error) {
	r := *c
	if r.Admin.AdminToken != "" {
		r.Admin.AdminToken = redactedValue
	}
	r.Admin.Tenants = slices.Clone(r.Admin.Tenants)
	for i := range r.Admin.Tenants {
		keys := make([]string, len(r.Admin.Tenants[i].Keys))
		for j := range keys {
			keys[j] = redactedValue
		}
		r.Admin.Tenants[i].Keys = keys
	}
	if r.State.URL != "" {
		r.State.URL = state.RedactURL(r.State.URL)
	}
	if r.Batch.Intake.URL != "" {
		r.Batch.Intake.URL = state.RedactURL(r.Batch.Intake.URL)
	}
	b, err := yaml.Marshal(&r)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// configWatch reloads the config file when it changes: the component the
// stack starts last and closes first, so that no reload runs while the
// stack stops.
type configWatch struct {
	s *Stack
	w *filewatch.Watcher
}

func (c *configWatch) Start(ctx context.Context) error {
	w, err := filewatch.New(c.s.reload.path)
	if err != nil {
		return err
	}
	c.w = w
	ctx = context.WithoutCancel(ctx)
	w.Run(configResync, func(event string, err error) {
		if err != nil {
			c.s.log.Warn("config file watch error; reading it again", "err", err)
		}
		c.s.reloadIfChanged(ctx)
	})
	return nil
}

func (c *configWatch) Close(ctx context.Context) error {
	if c.w == nil {
		return nil
	}
	return c.w.Close(ctx)
}

var _ component = (*configWatch)(nil)

var errNoConfigFile = errors.New("stack: started without a config file (Options.ConfigPath): nothing to reload")
