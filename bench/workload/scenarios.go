package workload

import "time"

// Defaults of the lending workload.
const (
	DefaultTrainerDuty     = 0.6
	DefaultTrainerCycle    = 20 * time.Second
	DefaultLendingCycles   = 3
	DefaultReclaimDeadline = 2 * time.Second
	DefaultAsyncJobs       = 96
	DefaultAsyncOutput     = 512
	DefaultTrainerStreams  = 4
	DefaultTrainerOutput   = 4096
)

// LendingConfig shapes the lending workload.
type LendingConfig struct {
	// TrainerDuty is the share of each cycle the trainer keeps the pool
	// busy, in (0,1). Default 0.6.
	TrainerDuty float64 `json:"trainer_duty" yaml:"trainer_duty"`
	// TrainerCycle is the length of one busy-then-idle cycle. Default 20s.
	TrainerCycle Duration `json:"trainer_cycle" yaml:"trainer_cycle"`
	// Cycles is the number of cycles of each of the two runs. Default 3.
	Cycles int `json:"cycles" yaml:"cycles"`
	// ReclaimDeadline is how long before the trainer's next busy phase
	// the pool is reclaimed, and the deadline the reclaim gives the lent
	// work in flight. Default 2s; less than the idle phase.
	ReclaimDeadline Duration `json:"reclaim_deadline" yaml:"reclaim_deadline"`
	// AsyncJobs is how many background responses are kept in flight.
	// Default 96.
	AsyncJobs int `json:"async_jobs" yaml:"async_jobs"`
	// AsyncOutputTokens is each background response's max_output_tokens.
	// Default 512.
	AsyncOutputTokens int `json:"async_output_tokens" yaml:"async_output_tokens"`
	// TrainerStreams is how many completions the trainer keeps running on
	// each engine while busy. Default 4.
	TrainerStreams int `json:"trainer_streams" yaml:"trainer_streams"`
	// TrainerOutputTokens is max_tokens of each trainer completion.
	// Default 4096.
	TrainerOutputTokens int `json:"trainer_output_tokens" yaml:"trainer_output_tokens"`
}

func (c *LendingConfig) ensureDefaults() {
	setDefault(&c.TrainerDuty, DefaultTrainerDuty)
	setDefault(&c.TrainerCycle, Duration(DefaultTrainerCycle))
	setDefault(&c.Cycles, DefaultLendingCycles)
	setDefault(&c.ReclaimDeadline, Duration(DefaultReclaimDeadline))
	setDefault(&c.AsyncJobs, DefaultAsyncJobs)
	setDefault(&c.AsyncOutputTokens, DefaultAsyncOutput)
	setDefault(&c.TrainerStreams, DefaultTrainerStreams)
	setDefault(&c.TrainerOutputTokens, DefaultTrainerOutput)
}

func (c *LendingConfig) validate(bad func(string, ...any)) {
	if !(c.TrainerDuty > 0 && c.TrainerDuty < 1) {
		bad("lending.trainer_duty %v: want in (0,1)", c.TrainerDuty)
	}
	idle := time.Duration(float64(c.TrainerCycle) * (1 - c.TrainerDuty))
	if c.ReclaimDeadline <= 0 || c.ReclaimDeadline.D() >= idle {
		bad("lending.reclaim_deadline %v: want > 0 and less than the idle phase (%v)", c.ReclaimDeadline, idle)
	}
	if c.Cycles < 1 || c.AsyncJobs < 1 || c.AsyncOutputTokens < 1 || c.TrainerStreams < 1 || c.TrainerOutputTokens < 1 {
		bad("lending: cycles, async_jobs, async_output_tokens, trainer_streams and trainer_output_tokens must be >= 1")
	}
}

// WorkloadOverload offers the fleet more than it can serve, in all three
// bands at once: open-loop arrivals of unique prompts (no prefix to reuse,
// so no routing policy can make the load fit), interactive at a modest
// rate, standard and background together well past the fleet's capacity.
// It shows what the gateway does when the fleet truly is saturated: which
// band waits, which is shed (with Retry-After), and whether interactive
// turns keep their latency.
const WorkloadOverload = "overload"

// Defaults of OverloadConfig, sized for the default bench fleet (four
// llama-3.1-70b replicas on MI300X) in real time, which serves about
// three of these requests a second: the defaults offer twice that.
const (
	DefaultOverloadDuration        = 30 * time.Second
	DefaultOverloadInteractiveRate = 1.0
	DefaultOverloadStandardRate    = 2.0
	DefaultOverloadBackgroundRate  = 3.0
	DefaultOverloadPromptTokens    = 4096
	DefaultOverloadOutputTokens    = 128
)

// OverloadConfig shapes the overload scenario. Rates are arrivals per
// second of workload time (Poisson), multiplied by TimeScale to wall time.
type OverloadConfig struct {
	// Duration is how long arrivals go on, in wall time. Default 30s.
	Duration Duration `json:"duration" yaml:"duration"`
	// InteractiveRate, StandardRate and BackgroundRate are each band's
	// arrivals per second. Defaults 1, 2 and 3; negative sends none.
	InteractiveRate float64 `json:"interactive_rate" yaml:"interactive_rate"`
	StandardRate    float64 `json:"standard_rate" yaml:"standard_rate"`
	BackgroundRate  float64 `json:"background_rate" yaml:"background_rate"`
	// PromptTokens per request, none shared with another. Default 4096.
	PromptTokens int `json:"prompt_tokens" yaml:"prompt_tokens"`
	// OutputTokens per request. Default 128.
	OutputTokens int `json:"output_tokens" yaml:"output_tokens"`
	// TimeScale multiplies the arrival gaps (0.1: ten times faster; the
	// embedded fleet's time scale by default). Default 1.
	TimeScale float64 `json:"time_scale" yaml:"time_scale"`
}

func (c *OverloadConfig) ensureDefaults() {
	setDefault(&c.Duration, Duration(DefaultOverloadDuration))
	setDefault(&c.InteractiveRate, DefaultOverloadInteractiveRate)
	setDefault(&c.StandardRate, DefaultOverloadStandardRate)
	setDefault(&c.BackgroundRate, DefaultOverloadBackgroundRate)
	setDefault(&c.PromptTokens, DefaultOverloadPromptTokens)
	setDefault(&c.OutputTokens, DefaultOverloadOutputTokens)
	setDefault(&c.TimeScale, DefaultTimeScale)
}

func (c *OverloadConfig) validate(bad func(string, ...any)) {
	if c.Duration <= 0 || c.PromptTokens < 1 || c.OutputTokens < 1 || c.TimeScale <= 0 {
		bad("overload: duration, prompt_tokens, output_tokens and time_scale must be positive")
	}
	if max(c.InteractiveRate, c.StandardRate, c.BackgroundRate) <= 0 {
		bad("overload: one of the rates must be positive")
	}
}
