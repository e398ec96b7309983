package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"
)

// TenantSpec is one tenant's share of an isolation run, for a load
// generator in a process of its own (Target.Tenant): the run's config,
// the gateway, the tenant (TenantA or TenantB), its key, and the run's
// start on the shared wall clock. A sends its interactive turns from
// Start, B its loops from Start plus the burst's offset, and both stop
// with the run, as they do in process.
type TenantSpec struct {
	Config  Config    `json:"config"`
	BaseURL string    `json:"base_url"`
	Tenant  string    `json:"tenant"`
	Key     string    `json:"key"`
	Start   time.Time `json:"start"`
}

// TenantSample is one request as a tenant's process reports it: the
// Sample, its start measured from the run's start, with its inter-token
// gaps.
type TenantSample struct {
	Sample
	ITL []time.Duration `json:"itl_ns,omitempty"`
}

// TenantRunner runs spec's tenant elsewhere (another process), handing
// record each of its requests as it ends.
type TenantRunner func(ctx context.Context, spec TenantSpec, record func(TenantSample)) error

// RunTenant runs spec's tenant of an isolation run in this process,
// handing emit each request as it ends (from several goroutines, one at a
// time). It is what a tenant's process runs; with ctx done early it
// returns once the requests in flight have ended.
func RunTenant(ctx context.Context, spec TenantSpec, emit func(TenantSample)) error {
	cfg := spec.Config
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Workload != WorkloadIsolation {
		return fmt.Errorf("bench: a tenant's process runs the isolation workload, not %q", cfg.Workload)
	}
	if spec.Start.IsZero() {
		return fmt.Errorf("bench: a tenant's process needs the run's start")
	}
	if spec.Tenant != TenantA && spec.Tenant != TenantB {
		return fmt.Errorf("bench: no isolation tenant %q", spec.Tenant)
	}
	cfg.Progress = io.Discard
	cfg.MaxDuration = cfg.Isolation.Duration
	r := newRunner(cfg, Target{BaseURL: spec.BaseURL, APIKey: spec.Key}, spec.Tenant, 0)
	r.start = spec.Start
	r.stopAt = r.start.Add(cfg.MaxDuration.D())
	var mu sync.Mutex
	r.emit = func(s *Sample) {
		mu.Lock()
		defer mu.Unlock()
		emit(TenantSample{Sample: *s, ITL: s.itl})
	}
	if spec.Tenant == TenantA {
		r.interactive(ctx, spec.Key)
	} else {
		r.burstLoops(ctx, spec.Key)
	}
	r.snd.close()
	return nil
}

// burstLoops runs B's loops until the run stops.
func (r *runner) burstLoops(ctx context.Context, key string) {
	ic := r.cfg.Isolation
	burstAt := time.Duration(float64(ic.Duration.D()) * ic.BurstStart)
	loops := int(math.Ceil(ic.BurstMultiple * float64(ic.FleetSlots)))
	var wg sync.WaitGroup
	for i := range loops {
		wg.Go(func() { r.agentLoop(ctx, i, burstAt, key, ic.BPriority) })
	}
	wg.Wait()
}

// tenant sends tenant's requests of this run, with key: through run in
// another process when run is set, else here.
func (r *runner) tenant(ctx context.Context, run TenantRunner, tenant, key string) error {
	if run == nil {
		if tenant == TenantA {
			r.interactive(ctx, key)
		} else {
			r.burstLoops(ctx, key)
		}
		return nil
	}
	spec := TenantSpec{Config: r.cfg, BaseURL: r.target.BaseURL, Tenant: tenant, Key: key, Start: r.start}
	spec.Config.Progress = nil
	err := run(ctx, spec, func(ts TenantSample) {
		s := ts.Sample
		s.itl = ts.ITL
		r.record(&s)
	})
	if err != nil {
		return fmt.Errorf("bench: isolation tenant %s: %w", tenant, err)
	}
	return nil
}
