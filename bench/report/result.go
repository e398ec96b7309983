package report

import (
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/scenario/agents"
	"github.com/turnpike-gateway/turnpike/bench/scenario/chaos"
	"github.com/turnpike-gateway/turnpike/bench/scenario/isolation"
	"github.com/turnpike-gateway/turnpike/bench/scenario/lending"
	"github.com/turnpike-gateway/turnpike/bench/scenario/lora"
	"github.com/turnpike-gateway/turnpike/bench/scenario/overload"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Result is the outcome of one run. It marshals to JSON as is: the
// figures of the measured run (driver.Result's, field for field and in
// the same order) and, for a scenario, its verdict.
type Result struct {
	// Policy is the routing policy the fleet ran (set by bench.Compare).
	Policy string `json:"policy,omitempty"`
	// Run is which of a repeated comparison's runs this is, from 1; 0
	// when the policy ran once.
	Run      int             `json:"run,omitempty"`
	Workload string          `json:"workload"`
	API      string          `json:"api"`
	Config   workload.Config `json:"config"`
	Started  time.Time       `json:"started"`
	// DurationSeconds is the wall time from the first request due to the
	// last one ended; rates are over it.
	DurationSeconds float64 `json:"duration_seconds"`
	// Total covers every request; ByTenant and ByBand split it.
	Total    driver.Summary             `json:"total"`
	ByTenant map[string]*driver.Summary `json:"by_tenant"`
	ByBand   map[string]*driver.Summary `json:"by_band"`
	// Engines is the engines' own prefix-cache account; nil when
	// Target.EngineMetricsURLs is empty.
	Engines *scrape.EngineCache `json:"engines,omitempty"`
	// CachePrediction is the gateway's prediction of the cached tokens of
	// the run's turns against what the engines reported; nil when the
	// gateway's /metrics has none (a policy without a KV-cache index).
	CachePrediction *scrape.CachePrediction `json:"cache_prediction,omitempty"`
	// Ideal is the prefix reuse an ideal router could have won, and the
	// share of it the engines captured; nil for the isolation scenario.
	Ideal    *driver.IdealReuse `json:"ideal,omitempty"`
	CDF      driver.CDF         `json:"cdf"`
	Timeline driver.Timeline    `json:"timeline"`
	// Occupancy is the fleet and the gateway's queue sampled once a
	// second; nil without engine metrics.
	Occupancy *scrape.Occupancy `json:"occupancy,omitempty"`
	// Isolation holds the scenario's figures when Workload is "isolation".
	Isolation *isolation.Report `json:"isolation,omitempty"`
	// Overload holds the scenario's figures per band when Workload is
	// "overload".
	Overload *overload.Report `json:"overload,omitempty"`
	// Chaos holds the chaos workload's failures, migrations and restarts.
	Chaos *chaos.Report `json:"chaos,omitempty"`
	// Cost is what the run's tokens cost per pool and overall, with the
	// SLO attainment it came at; nil without Target.Cost.
	Cost *driver.CostReport `json:"cost,omitempty"`
	// Interference is what Config.Interference's client sent, apart from
	// the run's figures; nil when none ran.
	Interference *driver.InterferenceReport `json:"interference,omitempty"`
	// BatchLoad is what became of Config.BatchLoad's batch; nil when none
	// was offered.
	BatchLoad *driver.BatchLoadReport `json:"batch_load,omitempty"`
	// Lending holds the lending workload's duty cycles and reclaims.
	Lending *lending.Report `json:"lending,omitempty"`
	// LoRA holds the lora workload's adapter loads.
	LoRA *lora.Report `json:"lora,omitempty"`
	// Agents holds the agents workload's figures, phase by phase.
	Agents *agents.Report `json:"agents,omitempty"`
	// Samples are every request's records when Config.KeepSamples is set.
	Samples []driver.Sample `json:"samples,omitempty"`
}

// ResultOf is the Result of a measured run, before any verdict.
func ResultOf(r *driver.Result) *Result {
	return &Result{
		Workload: r.Workload, API: r.API, Config: r.Config, Started: r.Started, DurationSeconds: r.DurationSeconds,
		Total: r.Total, ByTenant: r.ByTenant, ByBand: r.ByBand, Engines: r.Engines, CachePrediction: r.CachePrediction, Ideal: r.Ideal,
		CDF: r.CDF, Timeline: r.Timeline, Occupancy: r.Occupancy,
		Cost: r.Cost, Interference: r.Interference, BatchLoad: r.BatchLoad, Samples: r.Samples,
	}
}
