package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/state"
)

// Lending: a lendable pool (pools.PoolConfig.Lendable) is capacity that
// belongs to someone else, an RL trainer's accelerators between training
// steps. Lend opens it to work of the background band for a window;
// reclaim stops admission at once and gives the work in flight a deadline,
// after which it is cut (pools.ErrReclaimed) and dispatch moves it: a
// request not yet answered is retried on another endpoint, a stream is
// continued elsewhere (pools.Options.MaxMigrations), and a stream that
// cannot be continued ends with an upstream error naming the reclaim.
//
// A lease is written to the store under kvLendPrefix before it is applied,
// with a new version, so that every gateway sharing the store applies it
// at its next Refresh, and a restarted gateway applies it again.

// kvLendPrefix + pool name → pools.Lease as JSON.
const kvLendPrefix = "lend/"

// Bounds of a lending request.
const (
	// MaxLendWindow is the longest window one lend may open.
	MaxLendWindow = 7 * 24 * time.Hour
	// MaxReclaimDeadline is the longest deadline a lend or reclaim may
	// give the work in flight.
	MaxReclaimDeadline = time.Hour
)

// LendRequest is the body of POST /admin/v1/pools/{name}/lend: the window
// as an end time or a length, and how long work in flight may run on once
// it ends.
type LendRequest struct {
	// Until ends the window (RFC 3339). One of Until and Duration.
	Until string `json:"until,omitempty"`
	// Duration is the window's length from now, a Go duration ("10m").
	Duration string `json:"duration,omitempty"`
	// ReclaimDeadline is how long work in flight may run on when the
	// window ends or a reclaim names no deadline of its own, a Go
	// duration. Default pools.DefaultReclaimGrace (30s).
	ReclaimDeadline string `json:"reclaimDeadline,omitempty"`
}

// ReclaimRequest is the body of POST /admin/v1/pools/{name}/reclaim; it
// may be empty.
type ReclaimRequest struct {
	// Deadline is how long work in flight may run on, a Go duration; "0s"
	// cuts it now. Default the lease's reclaimDeadline.
	Deadline string `json:"deadline,omitempty"`
}

// ParseLend reads a lend body at now into the lease it opens. An empty
// body is refused: a window must be named.
func ParseLend(body []byte, now time.Time) (pools.Lease, error) {
	var req LendRequest
	if err := decodeJSON(body, &req); err != nil {
		return pools.Lease{}, asError(err)
	}
	var l pools.Lease
	switch {
	case req.Until != "" && req.Duration != "":
		return l, invalidf("until", "Give until or duration, not both.")
	case req.Until != "":
		t, err := time.Parse(time.RFC3339Nano, req.Until)
		if err != nil {
			return l, invalidf("until", "until %q is not an RFC 3339 time.", req.Until)
		}
		if !t.After(now) {
			return l, invalidf("until", "until %s is not in the future.", req.Until)
		}
		if t.Sub(now) > MaxLendWindow {
			return l, invalidf("until", "until %s is more than %v away.", req.Until, MaxLendWindow)
		}
		l.Until = t.UTC()
	case req.Duration != "":
		d, err := parseDuration("duration", req.Duration, MaxLendWindow)
		if err != nil {
			return l, err
		}
		if d == 0 {
			return l, invalidf("duration", "duration must be positive.")
		}
		l.Until = now.Add(d).UTC()
	default:
		return l, invalidf("until", "Name the window: until (RFC 3339) or duration (\"10m\").")
	}
	l.Grace = pools.DefaultReclaimGrace
	if req.ReclaimDeadline != "" {
		d, err := parseDuration("reclaimDeadline", req.ReclaimDeadline, MaxReclaimDeadline)
		if err != nil {
			return l, err
		}
		l.Grace = d
	}
	return l, nil
}

// ParseReclaim reads a reclaim body; ok is false when it names no
// deadline.
func ParseReclaim(body []byte) (deadline time.Duration, ok bool, err error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return 0, false, nil
	}
	var req ReclaimRequest
	if err := decodeJSON(body, &req); err != nil {
		return 0, false, asError(err)
	}
	if req.Deadline == "" {
		return 0, false, nil
	}
	d, err := parseDuration("deadline", req.Deadline, MaxReclaimDeadline)
	return d, err == nil, err
}

// parseDuration reads a non-negative Go duration of at most most.
func parseDuration(field, v string, most time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, invalidf(field, "%s %q is not a duration such as \"30s\" or \"10m\".", field, v)
	}
	if d < 0 || d > most {
		return 0, invalidf(field, "%s %v is not between 0s and %v.", field, d, most)
	}
	return d, nil
}

// Lending is a pool's lending state as the API shows it.
type Lending struct {
	// State is "lent" (taking background work), "reclaiming" (admission
	// stopped, work in flight running until the deadline) or "idle".
	State string `json:"state"`
	// Until is the window's end; ReclaimedAt when it was reclaimed
	// early; Deadline when work still in flight is cut.
	Until       time.Time `json:"until,omitzero"`
	ReclaimedAt time.Time `json:"reclaimedAt,omitzero"`
	Deadline    time.Time `json:"deadline,omitzero"`
	// ReclaimDeadlineSeconds is the lease's grace for work in flight.
	ReclaimDeadlineSeconds float64 `json:"reclaimDeadlineSeconds,omitempty"`
	// InFlight is this gateway's lent requests on the pool.
	InFlight int `json:"inFlight"`
	// Reclaims counts this gateway's leases of the pool that ended;
	// CancelledByReclaim its requests cut at a deadline.
	Reclaims           int64 `json:"reclaims"`
	CancelledByReclaim int64 `json:"cancelledByReclaim"`
}

// Lending states.
const (
	LendingLent       = "lent"
	LendingReclaiming = "reclaiming"
	LendingIdle       = "idle"
)

func lendingView(p *pools.Pool, now time.Time) *Lending {
	if !p.Lendable() {
		return nil
	}
	l := p.Lease()
	v := &Lending{
		State:              LendingIdle,
		Until:              l.Until,
		ReclaimedAt:        l.ReclaimedAt,
		Deadline:           l.Deadline(),
		InFlight:           p.LentInFlight(),
		Reclaims:           p.Reclaims(),
		CancelledByReclaim: p.CancelledByReclaim(),
	}
	if !l.Until.IsZero() {
		v.ReclaimDeadlineSeconds = l.Grace.Seconds()
	}
	switch {
	case p.Lent():
		v.State = LendingLent
	case !l.Until.IsZero() && now.Before(v.Deadline):
		v.State = LendingReclaiming
	}
	return v
}

func (s *Service) poolView(p *pools.Pool) Pool {
	v := Pool{
		Name:               p.Name(),
		Engine:             p.Config.Engine,
		Role:               p.Config.Role,
		Accelerator:        p.Config.Accelerator,
		Model:              p.Config.Model,
		Models:             p.Config.ServedModels,
		Lendable:           p.Lendable(),
		PriorityScheduling: p.Config.PriorityScheduling,
		Lending:            lendingView(p, s.now()),
		Endpoints:          make([]Endpoint, 0, len(p.Endpoints())),
	}
	for _, ep := range p.Endpoints() {
		v.Endpoints = append(v.Endpoints, s.endpointView(ep))
	}
	return v
}

func (s *Service) pool(c echo.Context) (*pools.Pool, error) {
	name := param(c, "name")
	if s.deps.Registry != nil {
		for _, p := range s.deps.Registry.Pools {
			if p.Name() == name {
				return p, nil
			}
		}
	}
	return nil, notFoundf("name", "pool_not_found", "No pool %q.", name)
}

func (s *Service) getPool(c echo.Context) error {
	p, err := s.pool(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.poolView(p))
}

// poolChange reads the body of a change to the named pool, makes it with
// change and answers the pool as it now is.
func (s *Service) poolChange(c echo.Context, change func(ctx context.Context, p *pools.Pool, body []byte) error) error {
	p, err := s.pool(c)
	if err != nil {
		return err
	}
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if err := change(c.Request().Context(), p, body); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.poolView(p))
}

func (s *Service) lendPool(c echo.Context) error {
	return s.poolChange(c, func(ctx context.Context, p *pools.Pool, body []byte) error {
		l, err := ParseLend(body, s.now())
		if err != nil {
			return err
		}
		return s.Lend(ctx, p, l)
	})
}

func (s *Service) reclaimPool(c echo.Context) error {
	return s.poolChange(c, func(ctx context.Context, p *pools.Pool, body []byte) error {
		d, ok, err := ParseReclaim(body)
		if err != nil {
			return err
		}
		return s.Reclaim(ctx, p, d, ok)
	})
}

func notLendable(p *pools.Pool) *apierror.Error {
	return apierror.Conflict("name", "pool_not_lendable", "Pool %q is not lendable; mark it lendable: true in the config file.", p.Name()).WithClass(ErrInvalid)
}

// Lend opens p to background work under l, replacing any lease it has,
// on this gateway at once and on the others sharing the store at their
// next Refresh.
func (s *Service) Lend(ctx context.Context, p *pools.Pool, l pools.Lease) error {
	if !p.Lendable() {
		return notLendable(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.putLeaseLocked(ctx, p, l); err != nil {
		return err
	}
	s.log.Info("admin: pool lent", "pool", p.Name(), "until", l.Until, "reclaim_deadline", l.Grace)
	return nil
}

// Reclaim stops admission to the lent pool p at once; the work in flight
// is cut after deadline, or the lease's own when set is false. A second
// reclaim may bring the deadline forward, never push it back.
func (s *Service) Reclaim(ctx context.Context, p *pools.Pool, deadline time.Duration, set bool) error {
	if !p.Lendable() {
		return notLendable(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	l := p.Lease()
	if l.Until.IsZero() || !now.Before(l.Deadline()) {
		return apierror.Conflict("name", "pool_not_lent", "Pool %q is not lent.", p.Name()).WithClass(ErrInvalid)
	}
	if !set {
		deadline = l.Grace
	}
	by := now.Add(deadline).UTC()
	if by.After(l.Deadline()) {
		by = l.Deadline()
	}
	if l.ReclaimedAt.IsZero() {
		l.ReclaimedAt = now.UTC()
	}
	l.ReclaimBy = by
	if err := s.putLeaseLocked(ctx, p, l); err != nil {
		return err
	}
	s.log.Info("admin: pool reclaimed", "pool", p.Name(), "deadline", by, "in_flight", p.LentInFlight())
	return nil
}

func (s *Service) putLeaseLocked(ctx context.Context, p *pools.Pool, l pools.Lease) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := s.deps.Store.Put(ctx, []byte(kvLendPrefix+p.Name()), b); err != nil {
		return err
	}
	if err := s.changedLocked(ctx); err != nil {
		return err
	}
	p.SetLease(l, s.now())
	return nil
}

// loadLeasesLocked applies the leases in the store to the lendable pools:
// the ones another gateway wrote, and after a restart the ones still in
// force.
func (s *Service) loadLeasesLocked(ctx context.Context) error {
	if s.deps.Registry == nil {
		return nil
	}
	leases := map[string]pools.Lease{}
	err := s.deps.Store.Scan(ctx, state.Prefix([]byte(kvLendPrefix)), func(k, v []byte) error {
		name := strings.TrimPrefix(string(k), kvLendPrefix)
		l, err := decodeLease(name, v)
		leases[name] = l
		return err
	})
	if err != nil {
		return err
	}
	now := s.now()
	for _, p := range s.deps.Registry.Pools {
		if p.Lendable() {
			p.SetLease(leases[p.Name()], now)
		}
	}
	return nil
}

// lendCollector exports the lending state of the lendable pools.
type lendCollector struct {
	reg                              *pools.Registry
	lent, inFlight, reclaims, cancel *prometheus.Desc
}

func newLendCollector(reg *pools.Registry) *lendCollector {
	l := []string{"pool"}
	return &lendCollector{
		reg:      reg,
		lent:     prometheus.NewDesc("turnpike_pool_lent", "1 while the lendable pool takes lent background work, 0 otherwise.", l, nil),
		inFlight: prometheus.NewDesc("turnpike_pool_lent_in_flight", "Lent requests in flight on the lendable pool from this gateway.", l, nil),
		reclaims: prometheus.NewDesc("turnpike_pool_reclaims_total", "Leases of the lendable pool that ended: reclaimed, or their window over.", l, nil),
		cancel:   prometheus.NewDesc("turnpike_pool_reclaim_cancelled_total", "Lent requests cut because a reclaim's deadline passed.", l, nil),
	}
}

func (c *lendCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lent
	ch <- c.inFlight
	ch <- c.reclaims
	ch <- c.cancel
}

func (c *lendCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.reg.Pools {
		if !p.Lendable() {
			continue
		}
		lent := 0.0
		if p.Lent() {
			lent = 1
		}
		ch <- prometheus.MustNewConstMetric(c.lent, prometheus.GaugeValue, lent, p.Name())
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(p.LentInFlight()), p.Name())
		ch <- prometheus.MustNewConstMetric(c.reclaims, prometheus.CounterValue, float64(p.Reclaims()), p.Name())
		ch <- prometheus.MustNewConstMetric(c.cancel, prometheus.CounterValue, float64(p.CancelledByReclaim()), p.Name())
	}
}

// registerLendMetrics registers the lending metrics when the fleet has a
// lendable pool.
func (s *Service) registerLendMetrics() error {
	if s.deps.Metrics == nil || s.deps.Registry == nil {
		return nil
	}
	for _, p := range s.deps.Registry.Pools {
		if p.Lendable() {
			if err := s.deps.Metrics.Register(newLendCollector(s.deps.Registry)); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
				return err
			}
			return nil
		}
	}
	return nil
}

// ApplyLendSchedules lends each lendable pool whose schedule
// (pools.PoolConfig.LendSchedule) has a window open now until that
// window's end, unless its lease already runs that long: so a window is
// opened once, a reclaim through the API ends its lending until the next
// window, a longer lease named through the API stands, and a shorter one
// is extended to the window's end. Gateways sharing a store write the
// same lease, which each applies once. Start calls it every second.
func (s *Service) ApplyLendSchedules(ctx context.Context) error {
	if s.deps.Registry == nil {
		return nil
	}
	now := s.now()
	var errs []error
	for _, p := range s.deps.Registry.Pools {
		sched := p.Config.LendSchedule
		if sched == nil || !p.Lendable() {
			continue
		}
		_, end, ok := sched.WindowAt(now)
		cur := p.Lease()
		if !ok || !cur.Until.Before(end) {
			continue
		}
		if cur.Admits(now) && cur.Until.Sub(now) > scheduleRenewAhead {
			continue // renewed later, not at every tick of a schedule that never closes
		}
		// Another gateway may have written the lease since this one last
		// read the store, or reclaimed it: the store has the last word.
		if stored, found, err := s.storedLease(ctx, p); err != nil {
			errs = append(errs, err)
			continue
		} else if found && !stored.Until.Before(end) {
			p.SetLease(stored, now)
			continue
		}
		l := pools.Lease{Until: end.UTC(), Grace: sched.Grace()}
		if err := s.Lend(ctx, p, l); err != nil {
			errs = append(errs, fmt.Errorf("admin: lending pool %q on its schedule: %w", p.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// scheduleRenewAhead is how long before its end a scheduled lease is
// extended when its window goes on (windows that join run up to a week
// ahead).
const scheduleRenewAhead = 24 * time.Hour

// storedLease reads p's lease from the store; found is false when it has
// none.
func (s *Service) storedLease(ctx context.Context, p *pools.Pool) (l pools.Lease, found bool, err error) {
	b, err := s.deps.Store.Get(ctx, []byte(kvLendPrefix+p.Name()))
	if errors.Is(err, state.ErrNotFound) {
		return l, false, nil
	}
	if err != nil {
		return l, false, fmt.Errorf("admin: reading the lease of pool %q: %w", p.Name(), err)
	}
	l, err = decodeLease(p.Name(), b)
	return l, err == nil, err
}

// decodeLease reads the stored lease of the pool called name.
func decodeLease(name string, v []byte) (pools.Lease, error) {
	var l pools.Lease
	if err := json.Unmarshal(v, &l); err != nil {
		return pools.Lease{}, fmt.Errorf("admin: stored lease of pool %q: %w", name, err)
	}
	return l, nil
}

// HasLendSchedules reports whether a pool of the fleet is lent on a
// schedule, so that ApplyLendSchedules has work.
func (s *Service) HasLendSchedules() bool {
	if s.deps.Registry == nil {
		return false
	}
	for _, p := range s.deps.Registry.Pools {
		if p.Lendable() && p.Config.LendSchedule != nil {
			return true
		}
	}
	return false
}
