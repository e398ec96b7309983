package driver

import (
	"time"

	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// CostSetup prices a run: the fleet's pools with their chips' prices, and
// the TTFT target whose attainment the cost is compared at. The embedded
// fleet fills it from the accelerator catalog; nil: no cost figures.
type CostSetup struct {
	// Pools are the fleet's pools; each engine of Target.EngineMetricsURLs
	// belongs to at most one.
	Pools []PoolSetup `json:"pools"`
	// ClockScale is hardware seconds per wall second: 1 for real engines,
	// 1/time scale for the simulator (whose engines run the modelled
	// hardware's time faster than the wall clock). Zero means 1.
	ClockScale float64 `json:"clock_scale"`
	// TTFTTarget is the time-to-first-token target of SLO attainment, in
	// wall time. Zero: no attainment figure.
	TTFTTarget workload.Duration `json:"ttft_target"`
}

// PoolSetup is one pool of the fleet.
type PoolSetup struct {
	Name        string `json:"name"`
	Accelerator string `json:"accelerator"`
	// DollarsPerHour is one chip's price per hour; each engine is one chip.
	DollarsPerHour float64 `json:"dollars_per_hour"`
	// PrefillSecondsPerToken is the chip time one uncached prompt token
	// takes (the roofline's prefill), which splits the pool's cost between
	// input and output tokens. Zero: all of it is charged to output.
	PrefillSecondsPerToken float64 `json:"prefill_seconds_per_token"`
	// Engines are the pool's engines, as indices into
	// Target.EngineMetricsURLs.
	Engines []int `json:"engines"`
}

// CostReport is what the run's tokens cost, per pool and overall.
//
// A pool's cost is its chip-hours over the run, chips × run time (on the
// hardware's clock), times its price per chip-hour: what a fleet kept up
// for the run pays, whatever it served. Of that cost, the share of the
// chip time its uncached prompt tokens took to prefill (by the roofline)
// is charged to input tokens, the rest (decode, and idle time) to output
// tokens; cost per million input tokens counts every prompt token, cached
// or not, as providers bill them. The busy cost counts only the chip time
// the pool's engines had a sequence running or waiting (sampled once a
// second): what a fleet that lends or scales away idle chips pays.
type CostReport struct {
	// HardwareSeconds is the run's wall time on the hardware's clock.
	HardwareSeconds float64 `json:"hardware_seconds"`
	// TTFTTargetMs is the target of SLOAttainment, in wall milliseconds.
	TTFTTargetMs float64 `json:"ttft_target_ms,omitempty"`
	// SLOAttainment is the share of turns whose time to first token was
	// within the target; failed and shed turns count as missed.
	SLOAttainment float64    `json:"slo_attainment"`
	Pools         []PoolCost `json:"pools"`
	// Overall sums the pools.
	Overall PoolCost `json:"overall"`
}

// PoolCost is one pool's (or the fleet's) tokens and their cost.
type PoolCost struct {
	Pool           string  `json:"pool"`
	Accelerator    string  `json:"accelerator,omitempty"`
	Chips          int     `json:"chips"`
	DollarsPerHour float64 `json:"dollars_per_hour,omitempty"`
	// Token counts from the engines' counters over the run.
	InputTokens       float64 `json:"input_tokens"`
	CachedInputTokens float64 `json:"cached_input_tokens"`
	OutputTokens      float64 `json:"output_tokens"`
	// Dollars is chips × hours × price; InputDollars its input share.
	Dollars      float64 `json:"dollars"`
	InputDollars float64 `json:"input_dollars"`
	// BusyShare is the share of the pool's chip time with work;
	// BusyDollars the cost of that time alone.
	BusyShare   float64 `json:"busy_share"`
	BusyDollars float64 `json:"busy_dollars"`
	// Dollars per million tokens: input, output, all tokens, and all
	// tokens at the busy cost. 0 when no such token was served.
	InputPerMtok  float64 `json:"input_per_mtok"`
	OutputPerMtok float64 `json:"output_per_mtok"`
	PerMtok       float64 `json:"per_mtok"`
	BusyPerMtok   float64 `json:"busy_per_mtok"`
}

// perMtok is dollars over tokens in millions, 0 without tokens.
func perMtok(dollars, tokens float64) float64 {
	if !(tokens > 0) {
		return 0
	}
	return dollars / tokens * 1e6
}

func (p *PoolCost) rates() {
	p.InputPerMtok = perMtok(p.InputDollars, p.InputTokens)
	p.OutputPerMtok = perMtok(p.Dollars-p.InputDollars, p.OutputTokens)
	p.PerMtok = perMtok(p.Dollars, p.InputTokens+p.OutputTokens)
	p.BusyPerMtok = perMtok(p.BusyDollars, p.InputTokens+p.OutputTokens)
}

// costReport prices a run of wall time from the engines' scrapes before
// and after it, the occupancy samples and the requests' samples; nil
// without a setup.
func costReport(setup *CostSetup, before, after []scrape.EngineMetrics, wall time.Duration, occ *scrape.Occupancy, samples []*Sample) *CostReport {
	if setup == nil || len(setup.Pools) == 0 {
		return nil
	}
	scale := setup.ClockScale
	if !(scale > 0) {
		scale = 1
	}
	rep := &CostReport{HardwareSeconds: wall.Seconds() * scale, Overall: PoolCost{Pool: "overall"}}
	hours := rep.HardwareSeconds / 3600
	for _, ps := range setup.Pools {
		pc := PoolCost{Pool: ps.Name, Accelerator: ps.Accelerator, Chips: len(ps.Engines), DollarsPerHour: ps.DollarsPerHour}
		var busy float64
		for _, i := range ps.Engines {
			if i < 0 || i >= len(before) || i >= len(after) || before[i] == nil || after[i] == nil {
				continue
			}
			f := scrape.FiguresBetween(before[i], after[i])
			pc.InputTokens += f.PromptTokens
			pc.CachedInputTokens += f.HitTokens
			pc.OutputTokens += f.GenerationTokens
			busy += busyShare(occ, i)
		}
		chipSeconds := float64(pc.Chips) * rep.HardwareSeconds
		pc.Dollars = float64(pc.Chips) * hours * ps.DollarsPerHour
		if chipSeconds > 0 {
			prefill := max(pc.InputTokens-pc.CachedInputTokens, 0) * ps.PrefillSecondsPerToken
			pc.InputDollars = pc.Dollars * min(prefill/chipSeconds, 1)
		}
		if pc.Chips > 0 {
			pc.BusyShare = busy / float64(pc.Chips)
		}
		pc.BusyDollars = pc.Dollars * pc.BusyShare
		pc.rates()
		o := &rep.Overall
		o.Chips += pc.Chips
		o.InputTokens += pc.InputTokens
		o.CachedInputTokens += pc.CachedInputTokens
		o.OutputTokens += pc.OutputTokens
		o.Dollars += pc.Dollars
		o.InputDollars += pc.InputDollars
		o.BusyDollars += pc.BusyDollars
		rep.Pools = append(rep.Pools, pc)
	}
	if rep.Overall.Dollars > 0 {
		rep.Overall.BusyShare = rep.Overall.BusyDollars / rep.Overall.Dollars
	}
	rep.Overall.rates()
	if t := setup.TTFTTarget.D(); t > 0 {
		rep.TTFTTargetMs = float64(t) / float64(time.Millisecond)
		rep.SLOAttainment = sloAttainment(samples, t)
	}
	return rep
}

// busyShare is the share of occupancy samples at which engine i had a
// sequence running or waiting; 1 when nothing was sampled (the engine is
// counted busy rather than free).
func busyShare(occ *scrape.Occupancy, i int) float64 {
	if occ == nil {
		return 1
	}
	var n, busy int
	for _, s := range occ.Samples {
		if i >= len(s.Running) || s.Running[i] < 0 {
			continue
		}
		n++
		if s.Running[i] > 0 || s.Waiting[i] > 0 {
			busy++
		}
	}
	if n == 0 {
		return 1
	}
	return float64(busy) / float64(n)
}

// sloAttainment is the share of samples answered with a first token
// within target, of those the bench did not cut.
func sloAttainment(samples []*Sample, target time.Duration) float64 {
	var met, n int
	for _, s := range samples {
		if s.Cut() {
			continue
		}
		n++
		if s.Error == "" && s.TTFT > 0 && s.TTFT <= target {
			met++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(met) / float64(n)
}
