package driver

import (
	"math"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// EngineMetrics keys of the engines' token counters.
var (
	vllmPromptKey     = scrape.Key(enginemetrics.VLLMPromptTokens)
	vllmGenerationKey = scrape.Key(enginemetrics.VLLMGenerationTokens)
	vllmHitsKey       = scrape.Key(enginemetrics.VLLMPrefixCacheHits)
	vllmGPUHitsKey    = scrape.Key(enginemetrics.VLLMGPUPrefixCacheHits)
)

// TestCostReport prices a two-pool run by hand: an hour of hardware time
// (a minute of wall time at a clock scale of 60).
func TestCostReport(t *testing.T) {
	setup := &CostSetup{
		ClockScale: 60,
		TTFTTarget: workload.Duration(100 * time.Millisecond),
		Pools: []PoolSetup{
			{Name: "gpu", Accelerator: "h200", DollarsPerHour: 5, PrefillSecondsPerToken: 1e-4, Engines: []int{0}},
			{Name: "tpu", Accelerator: "tpu-v6e", DollarsPerHour: 2.7, Engines: []int{1, 2}},
		},
	}
	before := []scrape.EngineMetrics{
		{vllmPromptKey: 1000, vllmGenerationKey: 10, vllmHitsKey: 0},
		{vllmPromptKey: 0, vllmGenerationKey: 0, vllmGPUHitsKey: 0},
		nil, // a failed scrape: the engine's tokens are unknown, its chip still paid for
	}
	after := []scrape.EngineMetrics{
		// 10M prompt tokens, 8M cached: 2M prefilled at 1e-4 s = 200 s of
		// the hour; 1M output.
		{vllmPromptKey: 10_001_000, vllmGenerationKey: 1_000_010, vllmHitsKey: 8_000_000},
		{vllmPromptKey: 500_000, vllmGenerationKey: 2_000_000, vllmGPUHitsKey: 100_000},
		{vllmPromptKey: 1, vllmGenerationKey: 1},
	}
	occ := &scrape.Occupancy{Samples: []scrape.OccupancySample{
		{Running: []float64{1, 0, 0}, Waiting: []float64{0, 0, 0}},
		{Running: []float64{1, 2, -1}, Waiting: []float64{0, 0, -1}},
		{Running: []float64{0, 0, 0}, Waiting: []float64{2, 0, 0}},
		{Running: []float64{3, 0, 0}, Waiting: []float64{0, 0, 0}},
	}}
	samples := []*Sample{
		{TTFT: 50 * time.Millisecond},
		{TTFT: 100 * time.Millisecond},
		{TTFT: 150 * time.Millisecond},
		{TTFT: 10 * time.Millisecond, Error: "shed"},
	}
	rep := costReport(setup, before, after, time.Minute, occ, samples)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*max(1, math.Abs(want)) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("hardware seconds", rep.HardwareSeconds, 3600)
	near("SLO attainment", rep.SLOAttainment, 0.5)
	gpu, tpu, all := rep.Pools[0], rep.Pools[1], rep.Overall
	near("gpu dollars", gpu.Dollars, 5)
	near("gpu input dollars", gpu.InputDollars, 5*200.0/3600)
	near("gpu $/Mtok in", gpu.InputPerMtok, 5*200.0/3600/10)
	near("gpu $/Mtok out", gpu.OutputPerMtok, 5*3400.0/3600/1)
	near("gpu busy", gpu.BusyShare, 1)
	near("tpu dollars", tpu.Dollars, 5.4)
	near("tpu $/Mtok out", tpu.OutputPerMtok, 5.4/2)
	near("tpu $/Mtok in (no prefill time: nothing charged)", tpu.InputPerMtok, 0)
	near("tpu cached", tpu.CachedInputTokens, 100_000)
	// Engine 1 busy in 1 of 4 samples, engine 2 never in its 3.
	near("tpu busy", tpu.BusyShare, 0.125)
	near("tpu busy dollars", tpu.BusyDollars, 5.4*0.125)
	near("overall dollars", all.Dollars, 10.4)
	near("overall $/Mtok", all.PerMtok, 10.4/(10.5+3))
	near("overall busy $/Mtok", all.BusyPerMtok, (5+5.4*0.125)/13.5)
	if costReport(nil, before, after, time.Minute, occ, samples) != nil {
		t.Error("a report without a setup")
	}
}

// TestOccupancyEvery: the occupancy sampler scrapes the gateway a second
// apart on the fleet's clock, so a fleet slowed ten times is sampled ten
// wall seconds apart, and never more often than a wall second.
func TestOccupancyEvery(t *testing.T) {
	for _, tc := range []struct {
		cost *CostSetup
		want time.Duration
	}{
		{nil, time.Second},
		{&CostSetup{}, time.Second},
		{&CostSetup{ClockScale: 1}, time.Second},
		{&CostSetup{ClockScale: 0.1}, 10 * time.Second},
		{&CostSetup{ClockScale: 20}, time.Second},
	} {
		if got := occupancyEvery(tc.cost); got != tc.want {
			t.Errorf("occupancyEvery(%+v) = %v, want %v", tc.cost, got, tc.want)
		}
	}
}

// The SLO attainment is of the requests answered or failed, not of those
// the bench cut at the run's end.
func TestSLOAttainmentLeavesCutOut(t *testing.T) {
	target := 100 * time.Millisecond
	samples := []*Sample{
		{TTFT: 50 * time.Millisecond},
		{TTFT: 150 * time.Millisecond},
		{Error: "http_503", Status: 503},
		{Error: ErrClassCanceled},
		{Error: ErrClassCanceled, TTFT: 20 * time.Millisecond},
	}
	if got := sloAttainment(samples, target); got != 1.0/3 {
		t.Errorf("attainment %v, want 1/3 (one met of three not cut)", got)
	}
	if got := sloAttainment(samples[3:], target); got != 0 {
		t.Errorf("attainment of cut requests only %v, want 0", got)
	}
}
