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
// time). It is what a tenant's process runs; with ctx done early it
// returns once the requests in flight have ended.
func RunTenant(ctx context.Context, spec driver.TenantSpec, emit func(driver.TenantLine)) error {
	cfg := spec.Config
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Workload != workload.WorkloadIsolation {
		return fmt.Errorf("bench: a tenant's process runs the isolation workload, not %q", cfg.Workload)
	}
	if spec.Start.IsZero() || spec.Until.Before(spec.From) || spec.From.Before(spec.Start) {
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
	driver.RunShare(ctx, cfg, target, spec, emit, func(ctx context.Context, r *driver.Runner) { runner{r}.here(ctx, spec) })
	return nil
}

// here sends spec's requests, tenant A's or one burst of B's, from this
// process until the runner stops.
func (r runner) here(ctx context.Context, spec driver.TenantSpec) {
	if spec.Tenant == TenantA {
		r.interactive(ctx, spec.Key)
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
// through run in another process when run is set, else here.
func (r runner) tenant(ctx context.Context, run driver.TenantRunner, spec driver.TenantSpec) error {
	if run == nil {
		runner{r.Until(spec.Until)}.here(ctx, spec)
		return nil
	}
	spec.Config = r.Config()
	_, err := r.Apart(ctx, run, spec)
	return err
}
