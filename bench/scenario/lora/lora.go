package lora

import (
	"context"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Report is the LoRA scenario's figures.
type Report struct {
	// Adapters is how many adapters the sessions ask for; Sessions how
	// many sessions ask for the most popular one.
	Adapters          int `json:"adapters"`
	TopAdapterSession int `json:"top_adapter_sessions"`
	// Requests is the requests sent; Loads the adapter loads the engines
	// made meanwhile, LoadsPer1000 per 1,000 requests.
	Requests     int     `json:"requests"`
	Loads        float64 `json:"loads"`
	LoadsPer1000 float64 `json:"loads_per_1000"`
	// WaitedOnLoad is the requests that waited on an adapter's load.
	WaitedOnLoad float64 `json:"waited_on_load"`
	// TTFT of the requests that answered, in ms.
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP90Ms float64 `json:"ttft_p90_ms"`
	// ScrapeErrors are the engine scrapes that failed: without them the
	// loads are undercounted.
	ScrapeErrors []string `json:"scrape_errors,omitempty"`
}

// Keys of the simulator's adapter counters in an engine scrape.
var (
	keyLoads = scrape.Key(enginemetrics.SimLoRALoads)
	keyWaits = scrape.Key(enginemetrics.SimLoRALoadWaits)
)

// Plan is the scenario's sessions: the agentic workload's, each asking
// for an adapter.
func Plan(cfg workload.Config) []workload.Session {
	sessions := workload.PlanAgentic(cfg)
	workload.AssignAdapters(cfg, sessions)
	return sessions
}

// Run sends the sessions and reports the adapter loads they caused.
func Run(ctx context.Context, cfg workload.Config, target driver.Target, label string) (*driver.Result, *Report, error) {
	sessions := Plan(cfg)
	before, errs := scrape.All(ctx, target.EngineMetricsURLs)
	res, samples := driver.Measure(ctx, cfg, target, label, len(sessions)*cfg.Agentic.TurnsPerSession, func(ctx context.Context, r *driver.Runner) {
		r.Sessions(ctx, sessions)
	})
	after, errs2 := scrape.All(context.WithoutCancel(ctx), target.EngineMetricsURLs)
	rep := &Report{Adapters: cfg.LoRA.Adapters, Requests: len(samples), ScrapeErrors: append(errs, errs2...)}
	for _, s := range sessions {
		if s.Model == workload.AdapterName(0) {
			rep.TopAdapterSession++
		}
	}
	for i := range after {
		if i < len(before) && before[i] != nil && after[i] != nil {
			rep.Loads += after[i][keyLoads] - before[i][keyLoads]
			rep.WaitedOnLoad += after[i][keyWaits] - before[i][keyWaits]
		}
	}
	if rep.Requests > 0 {
		rep.LoadsPer1000 = 1000 * rep.Loads / float64(rep.Requests)
	}
	rep.TTFTP50Ms, rep.TTFTP90Ms = res.Total.TTFT.P50Ms, res.Total.TTFT.P90Ms
	return res, rep, nil
}
