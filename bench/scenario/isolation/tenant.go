package isolation

import (
	"context"
	"fmt"
	"sync"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// TenantBatch names the isolation scenario's batch (Config.BatchLoad) as
// a tenant of TenantSpec: its client submits the batch as B's burst
// starts and follows it to its end.
const TenantBatch = "batch"

// RunTenant runs spec's tenant of an isolation run in this process,
// handing emit each line of its report (from several goroutines, one at a
// time). It is what a tenant's process runs. A, whose spec has no Until,
// sends until ctx ends, then returns once its turns in flight have ended;
// B and the batch end at Until, or sooner with ctx.
func RunTenant(ctx context.Context, spec driver.TenantSpec, emit func(driver.TenantLine)) error {
	cfg := spec.Config
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Workload != workload.WorkloadIsolation {
		return fmt.Errorf("bench: a tenant's process runs the isolation workload, not %q", cfg.Workload)
	}
	if spec.Start.IsZero() || spec.From.Before(spec.Start) || (spec.Until.Before(spec.From) && (spec.Tenant != TenantA || !spec.Until.IsZero())) {
		return fmt.Errorf("bench: a tenant's process needs the run's start, then when it sends from and until")
	}
	target := driver.Target{BaseURL: spec.BaseURL, APIKey: spec.Key}
	switch spec.Tenant {
	case TenantA, TenantB:
	case TenantBatch:
		if cfg.BatchLoad.Lines <= 0 {
			return fmt.Errorf("bench: a batch tenant without lines")
		}
		cfg.BatchLoad.Key = spec.Key
		if !driver.SleepUntil(ctx, spec.From) {
			return nil
		}
		rep := driver.StartBatchLoad(ctx, cfg, target)(spec.Until)
		emit(driver.TenantLine{Batch: rep})
		return nil
	default:
		return fmt.Errorf("bench: no isolation tenant %q", spec.Tenant)
	}
	send := ctx
	if spec.Tenant == TenantA {
		send = context.WithoutCancel(ctx)
	}
	driver.RunShare(send, cfg, target, spec, emit, func(send context.Context, r *driver.Runner) { runner{r}.here(send, ctx, spec) })
	return nil
}

// here sends spec's requests, tenant A's or one burst of B's, from this
// process until the runner stops, or for A until stop ends.
func (r runner) here(ctx, stop context.Context, spec driver.TenantSpec) {
	if spec.Tenant == TenantA {
		r.interactive(ctx, stop, spec.Key)
		return
	}
	ic := r.Config().Isolation
	from := spec.From.Sub(r.Started())
	var wg sync.WaitGroup
	for i := range loopsOf(ic) {
		wg.Go(func() { r.agentLoop(ctx, spec.Round, i, from, spec.Key, ic.BPriority) })
	}
	wg.Wait()
}

// tenant sends spec's requests of this run (its tenant, key and times):
// through run in another process when run is set, else here. A sends
// until stop ends; the others ignore stop.
func (r runner) tenant(ctx, stop context.Context, run driver.TenantRunner, spec driver.TenantSpec) error {
	if run == nil {
		runner{r.Until(spec.Until)}.here(ctx, stop, spec)
		return nil
	}
	spec.Config = r.Config()
	// Stopping A interrupts its process, which then ends its turns in
	// flight.
	_, err := r.Apart(stop, run, spec)
	return err
}
