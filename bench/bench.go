package bench

import (
	"context"

	"github.com/turnpike-gateway/turnpike/bench/driver"
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

// Workload and API names (workload.Workload*, workload.API*).
const (
	WorkloadAgentic    = workload.WorkloadAgentic
	WorkloadTrace      = workload.WorkloadTrace
	WorkloadIsolation  = workload.WorkloadIsolation
	WorkloadChaos      = workload.WorkloadChaos
	WorkloadLending    = workload.WorkloadLending
	WorkloadLongPrompt = workload.WorkloadLongPrompt
	WorkloadOverload   = workload.WorkloadOverload

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

// RunTenant runs spec's tenant of an isolation run in this process
// (isolation.RunTenant): what `turnpike bench tenant` runs.
func RunTenant(ctx context.Context, spec TenantSpec, emit func(TenantLine)) error {
	return isolation.RunTenant(ctx, spec, emit)
}
