package driver

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/workload"
)

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

// RunShare sends spec's share of a run from this process, as a tenant's
// process does: on the run's clock (spec.Start), until spec.Until, each
// request handed to emit as it ends (from several goroutines, one at a
// time) rather than kept. drive sends the requests. A zero spec.Until
// leaves the stop to ctx.
func RunShare(ctx context.Context, cfg workload.Config, target Target, spec TenantSpec, emit func(TenantLine), drive func(context.Context, *Runner)) {
	cfg.Progress = io.Discard
	cfg.MaxDuration = 0
	r := newRunner(cfg, target, spec.Tenant, 0)
	r.start = spec.Start
	r.stopAt = spec.Until
	var mu sync.Mutex
	r.emit = func(s *Sample) {
		mu.Lock()
		defer mu.Unlock()
		emit(TenantLine{Request: &TenantSample{Sample: *s, ITL: s.itl}})
	}
	drive(ctx, r)
	r.snd.close()
}

// Apart runs spec's tenant through run, on this run's gateway and clock,
// recording its requests as this run's; it returns the batch's report
// when the tenant reported one.
func (r *Runner) Apart(ctx context.Context, run TenantRunner, spec TenantSpec) (*BatchLoadReport, error) {
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
			r.Record(&s)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("bench: isolation tenant %s: %w", spec.Tenant, err)
	}
	return batch, nil
}
