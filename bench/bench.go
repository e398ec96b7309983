package bench

import (
	"context"
	"io"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/overhead"
	"github.com/turnpike-gateway/turnpike/bench/report"
	"github.com/turnpike-gateway/turnpike/bench/scenario/agents"
	"github.com/turnpike-gateway/turnpike/bench/scenario/isolation"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// The run's description lives in bench/workload; these names keep
// `turnpike bench` and its callers on the package they have always used.

// Config describes one benchmark run (workload.Config).
type Config = workload.Config

// Duration is a time.Duration that reads and writes as text
// (workload.Duration).
type Duration = workload.Duration

// LendingConfig shapes the lending workload (workload.LendingConfig).
type LendingConfig = workload.LendingConfig

// LoRAConfig shapes the lora workload (workload.LoRAConfig).
type LoRAConfig = workload.LoRAConfig

// AgentsConfig shapes the agents workload (workload.AgentsConfig).
type AgentsConfig = workload.AgentsConfig

// DefaultAgentsPhases are the agents workload's default phases.
var DefaultAgentsPhases = workload.DefaultAgentsPhases

// AdapterName is the name of the lora workload's adapter i.
func AdapterName(i int) string { return workload.AdapterName(i) }

// Workload and API names (workload.Workload*, workload.API*).
const (
	WorkloadAgentic    = workload.WorkloadAgentic
	WorkloadTrace      = workload.WorkloadTrace
	WorkloadIsolation  = workload.WorkloadIsolation
	WorkloadChaos      = workload.WorkloadChaos
	WorkloadLending    = workload.WorkloadLending
	WorkloadLongPrompt = workload.WorkloadLongPrompt
	WorkloadOverload   = workload.WorkloadOverload
	WorkloadLoRA       = workload.WorkloadLoRA
	WorkloadAgents     = workload.WorkloadAgents

	APIResponses = workload.APIResponses
	APIChat      = workload.APIChat
)

// Defaults of Config, as workload.EnsureDefaults applies them.
const (
	DefaultWorkload           = workload.DefaultWorkload
	DefaultAPI                = workload.DefaultAPI
	DefaultSeed               = workload.DefaultSeed
	DefaultTenants            = workload.DefaultTenants
	DefaultSystemPromptTokens = workload.DefaultSystemPromptTokens
	DefaultToolSchemaTokens   = workload.DefaultToolSchemaTokens
	DefaultOutputTokens       = workload.DefaultOutputTokens
	DefaultWaves              = workload.DefaultWaves
	DefaultTracePath          = workload.DefaultTracePath

	DefaultIsolationDuration = workload.DefaultIsolationDuration
	DefaultIsolationARate    = workload.DefaultIsolationARate
	DefaultIsolationRounds   = workload.DefaultIsolationRounds

	DefaultChaosFirstKill    = workload.DefaultChaosFirstKill
	DefaultChaosKillInterval = workload.DefaultChaosKillInterval
	DefaultChaosDowntime     = workload.DefaultChaosDowntime
	DefaultChaosAtOnce       = workload.DefaultChaosAtOnce

	DefaultLongPromptRequests = workload.DefaultLongPromptRequests
	DefaultLongPromptTokens   = workload.DefaultLongPromptTokens
	DefaultLongPromptOutput   = workload.DefaultLongPromptOutput
	DefaultLongPromptRate     = workload.DefaultLongPromptRate

	DefaultOverloadDuration        = workload.DefaultOverloadDuration
	DefaultOverloadInteractiveRate = workload.DefaultOverloadInteractiveRate
	DefaultOverloadStandardRate    = workload.DefaultOverloadStandardRate
	DefaultOverloadBackgroundRate  = workload.DefaultOverloadBackgroundRate
	DefaultOverloadPromptTokens    = workload.DefaultOverloadPromptTokens

	DefaultTrainerDuty     = workload.DefaultTrainerDuty
	DefaultTrainerCycle    = workload.DefaultTrainerCycle
	DefaultLendingCycles   = workload.DefaultLendingCycles
	DefaultLoRAAdapters    = workload.DefaultLoRAAdapters
	DefaultLoRAZipf        = workload.DefaultLoRAZipf
	DefaultReclaimDeadline = workload.DefaultReclaimDeadline
	DefaultAsyncJobs       = workload.DefaultAsyncJobs
	DefaultAsyncOutput     = workload.DefaultAsyncOutput

	DefaultInterferencePromptTokens = workload.DefaultInterferencePromptTokens
	DefaultInterferenceEngines      = workload.DefaultInterferenceEngines

	DefaultBatchPromptTokens = workload.DefaultBatchPromptTokens
	DefaultBatchOutputTokens = workload.DefaultBatchOutputTokens
	DefaultBatchDeadline     = workload.DefaultBatchDeadline
)

// InterferencePrompt is the interfering client's prompt number i of a run
// seeded seed (workload.InterferencePrompt).
func InterferencePrompt(seed uint64, i, n int) string { return workload.InterferencePrompt(seed, i, n) }

// The driver's names `turnpike bench` uses (bench/driver).
type (
	// Target is the gateway under test.
	Target = driver.Target
	// Summary is the figures of a set of requests.
	Summary = driver.Summary
	// CostSetup prices a run; PoolSetup is one pool of it.
	CostSetup = driver.CostSetup
	PoolSetup = driver.PoolSetup
	// LendingTarget is the lendable pool of the lending workload.
	LendingTarget = driver.LendingTarget
	// TenantSpec, TenantLine and TenantRunner run a tenant of the
	// isolation scenario in a process of its own.
	TenantSpec   = driver.TenantSpec
	TenantLine   = driver.TenantLine
	TenantRunner = driver.TenantRunner
)

// RunTenant runs spec's tenant in this process: a tenant of an isolation
// run (isolation.RunTenant), or the agents of an agents run
// (agents.RunTenant). It is what `turnpike bench tenant` runs.
func RunTenant(ctx context.Context, spec TenantSpec, emit func(TenantLine)) error {
	if spec.Config.Workload == WorkloadAgents {
		return agents.RunTenant(ctx, spec, emit)
	}
	return isolation.RunTenant(ctx, spec, emit)
}

// The report of a run or a comparison (bench/report).
type (
	// Result is the outcome of one run.
	Result = report.Result
	// Comparison is one workload run per policy, with the ratios.
	Comparison = report.Comparison
)

// WriteText prints results as terminal tables (report.WriteText).
func WriteText(w io.Writer, results ...*Result) error { return report.WriteText(w, results...) }

// WriteMarkdown prints the same as WriteText as markdown, for docs
// (report.WriteMarkdown).
func WriteMarkdown(w io.Writer, results ...*Result) error {
	return report.WriteMarkdown(w, results...)
}

// WriteHTML writes a self-contained HTML report of results
// (report.WriteHTML).
func WriteHTML(w io.Writer, results ...*Result) error { return report.WriteHTML(w, results...) }

// The proxy-overhead measurement and its instant engine (bench/overhead).
type (
	// OverheadConfig describes a proxy-overhead run.
	OverheadConfig = overhead.Config
	// OverheadTarget is one thing to measure: a URL and its process.
	OverheadTarget = overhead.Target
	// InstantConfig configures an InstantEngine.
	InstantConfig = overhead.InstantConfig
)

// Defaults of OverheadConfig and InstantConfig, and the kinds of
// OverheadConfig.Turns.
const (
	DefaultOverheadBodyBytes   = overhead.DefaultBodyBytes
	DefaultOverheadConcurrency = overhead.DefaultConcurrency
	DefaultOverheadDuration    = overhead.DefaultDuration
	DefaultOverheadWarmup      = overhead.DefaultWarmup
	DefaultOverheadRounds      = overhead.DefaultRounds
	DefaultOverheadTimeout     = overhead.DefaultTimeout
	DefaultOverheadWait        = overhead.DefaultWait

	DefaultInstantModel        = overhead.DefaultInstantModel
	DefaultInstantOutputTokens = overhead.DefaultInstantOutputTokens
	DefaultInstantNumGPUBlocks = overhead.DefaultInstantNumGPUBlocks

	TurnsNext   = overhead.TurnsNext
	TurnsRepeat = overhead.TurnsRepeat
	TurnsCold   = overhead.TurnsCold
)

// ParseOverheadTarget reads "name=url[,pid=N]" (overhead.ParseTarget).
func ParseOverheadTarget(s string) (OverheadTarget, error) { return overhead.ParseTarget(s) }

// RunOverhead measures every target, Rounds times, one at a time
// (overhead.Measure).
func RunOverhead(ctx context.Context, cfg OverheadConfig, targets []OverheadTarget, progress io.Writer) (*overhead.Result, error) {
	return overhead.Measure(ctx, cfg, targets, progress)
}

// NewInstantEngine returns an engine that answers at once
// (overhead.NewInstantEngine).
func NewInstantEngine(cfg InstantConfig) *overhead.InstantEngine {
	return overhead.NewInstantEngine(cfg)
}
