package driver

import "strings"

// Target is the gateway under test.
type Target struct {
	// BaseURL is the gateway's root ("http://127.0.0.1:8080"); "/v1" is
	// appended when missing.
	BaseURL string
	// APIKey is sent as Authorization: Bearer by every tenant without a key
	// of its own (Config.TenantKeys, IsolationConfig.KeyA/KeyB).
	APIKey string
	// EngineMetricsURLs are the engines' /metrics, read before and after the
	// run to compute the engines' own prefix-cache hit rate. Empty: no engine
	// figures.
	EngineMetricsURLs []string
	// GatewayMetricsURL is the gateway's /metrics, read before and after a
	// chaos run for its retry and migration counters. Empty: BaseURL's
	// root (without /v1) plus /metrics.
	GatewayMetricsURL string
	// Replicas kills and restarts the fleet's replicas in the chaos
	// workload, replica i being the engine of EngineMetricsURLs[i]. nil:
	// no chaos run.
	Replicas Replicas
	// EngineURLs are the engines' base URLs, which Config.Interference
	// sends to, bypassing the gateway. Empty: no interference.
	EngineURLs []string
	// SystemTokens counts the tokens of a prompt's opening system message
	// with text system, as the engines render and tokenize it, for the
	// agentic ideal's first turns. nil: 4 bytes a token, the simulator's
	// own rules.
	SystemTokens func(system string) int
	// KVCapacityTokens is the fleet's total prefix-cache capacity, in
	// tokens: the size of the global LRU the trace's ideal reuse is
	// computed for. 0: unknown, the ideal is that of an unbounded cache.
	KVCapacityTokens int
	// Cost prices the run per pool (Result.Cost). nil: no cost figures.
	Cost *CostSetup
	// Lending is the lendable pool of the lending workload; nil: none.
	Lending *LendingTarget
	// Tenant sends each of the isolation scenario's tenants from a
	// process of its own, so that B's load generator shares no Go
	// scheduler with A's client, nor either with the gateway. nil: both
	// run in this process.
	Tenant TenantRunner
}

// Replicas is the fleet the chaos workload crashes. Kill stops replica i
// as a crash would: streams in flight cut, connections refused. Restart
// brings it back on the same address, as a restarted process. The
// simulated fleet (sim.Fleet) is one.
type Replicas interface {
	Kill(i int) error
	Restart(i int) error
}

// LendingTarget is what the lending workload needs of the fleet beside
// the gateway.
type LendingTarget struct {
	// AdminToken is the gateway's admin bearer token.
	AdminToken string
	// Pool is the lendable pool's name.
	Pool string
	// EngineURLs are the lendable pool's engines' base URLs: the trainer
	// sends its load there, and their /metrics give the duty cycle.
	EngineURLs []string
	// FleetMetricsURLs are every engine's /metrics, watched until the
	// fleet is idle between the two runs. Empty: none watched.
	FleetMetricsURLs []string
}

// Key is the API key k, or APIKey when k is empty.
func (t Target) Key(k string) string {
	if k != "" {
		return k
	}
	return t.APIKey
}

// GatewayMetrics is GatewayMetricsURL, or the base URL's root plus
// /metrics.
func (t Target) GatewayMetrics() string {
	if t.GatewayMetricsURL != "" {
		return t.GatewayMetricsURL
	}
	return strings.TrimSuffix(strings.TrimRight(t.BaseURL, "/"), "/v1") + "/metrics"
}
