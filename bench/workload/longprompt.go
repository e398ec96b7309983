package workload

import (
	"math"
	"time"
)

// WorkloadLongPrompt is long, unique prompts arriving at a steady rate
// while earlier answers decode: the load on which prefill/decode
// disaggregation pays, since on an engine that does both every prefill
// chunk lengthens the steps of every decode beside it.
const WorkloadLongPrompt = "long-prompt"

// Defaults of LongPromptConfig.
const (
	DefaultLongPromptRequests = 200
	DefaultLongPromptTokens   = 8192
	DefaultLongPromptOutput   = 256
	DefaultLongPromptRate     = 4.0
)

// LongPromptConfig is the long-prompt workload.
type LongPromptConfig struct {
	// Requests in all. Default 200.
	Requests int `json:"requests" yaml:"requests"`
	// PromptTokens per request, none shared with another. Default 8192.
	PromptTokens int `json:"prompt_tokens" yaml:"prompt_tokens"`
	// OutputTokens per request. Default 256.
	OutputTokens int `json:"output_tokens" yaml:"output_tokens"`
	// Rate is arrivals per second of workload time (Poisson). Default 4.
	Rate float64 `json:"rate" yaml:"rate"`
	// TimeScale multiplies the arrival times (0.1: ten times faster; the
	// embedded fleet's time scale by default). Default 1.
	TimeScale float64 `json:"time_scale" yaml:"time_scale"`
	// KillAt, when > 0, kills replica KillReplica of the embedded fleet
	// this long (wall time) after the start, for good: the P/D fleet's
	// replica 0 is a prefiller. Needs Target.Replicas.
	KillAt      Duration `json:"kill_at,omitempty" yaml:"kill_at"`
	KillReplica int      `json:"kill_replica,omitempty" yaml:"kill_replica"`
}

func (c *LongPromptConfig) ensureDefaults() {
	setDefault(&c.Requests, DefaultLongPromptRequests)
	setDefault(&c.PromptTokens, DefaultLongPromptTokens)
	setDefault(&c.OutputTokens, DefaultLongPromptOutput)
	setDefault(&c.Rate, DefaultLongPromptRate)
	setDefault(&c.TimeScale, DefaultTimeScale)
}

func (c *LongPromptConfig) validate(bad func(string, ...any)) {
	if c.Requests < 1 || c.PromptTokens < 1 || c.OutputTokens < 1 {
		bad("long_prompt: requests, prompt_tokens and output_tokens must be positive")
	}
	if c.Rate <= 0 || c.TimeScale <= 0 {
		bad("long_prompt: rate and time_scale must be positive")
	}
	if c.KillAt < 0 || c.KillReplica < 0 {
		bad("long_prompt: kill_at and kill_replica must not be negative")
	}
}

// PlanLongPrompt plans the long-prompt workload: Poisson arrivals, each
// prompt made of blocks no other prompt has.
func PlanLongPrompt(cfg Config) []TraceRequest {
	lp := cfg.LongPrompt
	g := Rand(Mix(uint64(cfg.Seed), 0x10b6))
	blocks := (lp.PromptTokens + BlockTokens - 1) / BlockTokens
	out := make([]TraceRequest, lp.Requests)
	var at float64
	for i := range out {
		u := float64(g.Next()>>11) / (1 << 53)
		at += -math.Log(1-u) / lp.Rate
		ids := make([]int64, blocks)
		for j := range ids {
			ids[j] = int64(i*blocks+j) + 1<<40 // apart from trace ids
		}
		out[i] = TraceRequest{
			At:              time.Duration(at * lp.TimeScale * float64(time.Second)),
			InputTokens:     lp.PromptTokens,
			MaxOutputTokens: lp.OutputTokens,
			HashIDs:         ids,
		}
	}
	return out
}
