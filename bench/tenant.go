package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// TenantBatch names the isolation scenario's batch (Config.BatchLoad) as
// a tenant of TenantSpec: its client submits the batch as B's burst
// starts and follows it to its end.
const TenantBatch = "batch"

// TenantSpec is one tenant's share of an isolation run, for a load
// generator in a process of its own (Target.Tenant): the run's config,
// the gateway, the tenant (TenantA, TenantB or TenantBatch), its key, the
// run's start on the shared wall clock, and when the tenant sends. A
// sends its interactive turns from Start until Until; B's loops send one
// burst, from From until Until; the batch's client submits at From and
// follows the batch to its end or deadline, as they do in process.
type TenantSpec struct {
	Config  workload.Config `json:"config"`
	BaseURL string          `json:"base_url"`
	Tenant  string          `json:"tenant"`
	Key     string          `json:"key"`
	Start   time.Time       `json:"start"`
	From    time.Time       `json:"from"`
	Until   time.Time       `json:"until"`
	// Round is which of the run's bursts B sends, so that each burst's
	// sessions are its own.
	Round int `json:"round,omitempty"`
}

// TenantSample is one request as a tenant's process reports it: the
// Sample, its start measured from the run's start, with its inter-token
// gaps.
type TenantSample struct {
	Sample
	ITL []time.Duration `json:"itl_ns,omitempty"`
}

// TenantLine is one line of a tenant's report: a request as it ended, or
// the batch's report at its end.
type TenantLine struct {
	Request *TenantSample    `json:"request,omitempty"`
	Batch   *BatchLoadReport `json:"batch,omitempty"`
}

// TenantRunner runs spec's tenant elsewhere (another process), handing
// record each line of its report as it comes.
type TenantRunner func(ctx context.Context, spec TenantSpec, record func(TenantLine)) error

// RunTenant runs spec's tenant of an isolation run in this process,
// handing emit each line of its report (from several goroutines, one at a
// time). It is what a tenant's process runs; with ctx done early it
// returns once the requests in flight have ended.
func RunTenant(ctx context.Context, spec TenantSpec, emit func(TenantLine)) error {
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
	target := Target{BaseURL: spec.BaseURL, APIKey: spec.Key}
	switch spec.Tenant {
	case TenantA, TenantB:
	case TenantBatch:
		if cfg.BatchLoad.Lines <= 0 {
			return fmt.Errorf("bench: a batch tenant without lines")
		}
		cfg.BatchLoad.Key = spec.Key
		if !sleepUntil(ctx, spec.From) {
			return nil
		}
		rep := startBatchLoad(ctx, cfg, target)(spec.Until)
		emit(TenantLine{Batch: rep})
		return nil
	default:
		return fmt.Errorf("bench: no isolation tenant %q", spec.Tenant)
	}
	cfg.Progress = io.Discard
	cfg.MaxDuration = workload.Duration(spec.Until.Sub(spec.Start))
	r := newRunner(cfg, target, spec.Tenant, 0)
	r.start = spec.Start
	r.stopAt = spec.Until
	var mu sync.Mutex
	r.emit = func(s *Sample) {
		mu.Lock()
		defer mu.Unlock()
		emit(TenantLine{Request: &TenantSample{Sample: *s, ITL: s.itl}})
	}
	r.here(ctx, spec)
	r.snd.close()
	return nil
}

// here sends spec's requests, tenant A's or one burst of B's, from this
// process until the runner stops.
func (r *runner) here(ctx context.Context, spec TenantSpec) {
	if spec.Tenant == TenantA {
		r.interactive(ctx, spec.Key)
		return
	}
	ic := r.cfg.Isolation
	from := spec.From.Sub(r.start)
	var wg sync.WaitGroup
	for i := range isolationLoops(ic) {
		wg.Go(func() { r.agentLoop(ctx, spec.Round, i, from, spec.Key, ic.BPriority) })
	}
	wg.Wait()
}

// tenant sends spec's requests of this run (its tenant, key and times):
// through run in another process when run is set, else here.
func (r *runner) tenant(ctx context.Context, run TenantRunner, spec TenantSpec) error {
	if run == nil {
		r.until(spec.Until).here(ctx, spec)
		return nil
	}
	spec.Config = r.cfg
	_, err := r.apart(ctx, run, spec)
	return err
}

// apart runs spec's tenant through run, on this run's gateway and clock,
// recording its requests as this run's; it returns the batch's report
// when the tenant reported one.
func (r *runner) apart(ctx context.Context, run TenantRunner, spec TenantSpec) (*BatchLoadReport, error) {
	spec.BaseURL, spec.Start = r.target.BaseURL, r.start
	spec.Config.Progress = nil
	var batch *BatchLoadReport
	err := run(ctx, spec, func(l TenantLine) {
		if l.Batch != nil {
			batch = l.Batch
		}
		if l.Request != nil {
			s := l.Request.Sample
			s.itl = l.Request.ITL
			r.record(&s)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("bench: isolation tenant %s: %w", spec.Tenant, err)
	}
	return batch, nil
}
