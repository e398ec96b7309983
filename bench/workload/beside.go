package workload

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Defaults of InterferenceConfig.
const (
	DefaultInterferencePromptTokens = 4096
	DefaultInterferenceOutputTokens = 8
	DefaultInterferenceEngines      = 1
	DefaultInterferenceMaxInFlight  = 8
)

// InterferenceConfig is another client of the engines, one the gateway
// never sees: it sends chat completions of its own straight to engines'
// URLs (Target.EngineURLs) at a steady rate, each prompt unlike any other,
// so the engines evict blocks to hold them and the gateway learns of those
// evictions only from the engines' KV events, if it subscribes to them.
// Its requests are not turns of the run: they are counted apart
// (driver.Result.Interference), and their prompt tokens are taken out of the
// engines' prefix-cache figures. Off while Rate is 0.
type InterferenceConfig struct {
	// Rate is requests per second of the workload's clock (TimeScale).
	// 0 (default): no interference.
	Rate float64 `json:"rate,omitempty" yaml:"rate"`
	// PromptTokens is each request's prompt length, in generated tokens
	// (about 4 bytes each). Default 4096.
	PromptTokens int `json:"prompt_tokens,omitempty" yaml:"prompt_tokens"`
	// OutputTokens is each request's max_tokens. Default 8.
	OutputTokens int `json:"output_tokens,omitempty" yaml:"output_tokens"`
	// Engines is how many engines it sends to, the first of
	// Target.EngineURLs, dealt in turn. Default 1: one engine's cache
	// churns while the others' do not.
	Engines int `json:"engines,omitempty" yaml:"engines"`
	// MaxInFlight caps its requests in flight; a request due while the cap
	// is reached is skipped and counted. Default 8.
	MaxInFlight int `json:"max_in_flight,omitempty" yaml:"max_in_flight"`
	// TimeScale multiplies the interval between requests, like
	// AgenticConfig.TimeScale (the simulated fleet's time scale when
	// embedded). Default 1.
	TimeScale float64 `json:"time_scale,omitempty" yaml:"time_scale"`
}

func (c *InterferenceConfig) ensureDefaults() {
	setDefault(&c.PromptTokens, DefaultInterferencePromptTokens)
	setDefault(&c.OutputTokens, DefaultInterferenceOutputTokens)
	setDefault(&c.Engines, DefaultInterferenceEngines)
	setDefault(&c.MaxInFlight, DefaultInterferenceMaxInFlight)
	setDefault(&c.TimeScale, DefaultTimeScale)
}

func (c *InterferenceConfig) validate(bad func(string, ...any)) {
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		bad("interference.rate %v: want >= 0", c.Rate)
	}
	if c.PromptTokens < 1 || c.OutputTokens < 1 || c.Engines < 1 || c.MaxInFlight < 1 {
		bad("interference: prompt_tokens, output_tokens, engines and max_in_flight must be positive")
	}
	if !(c.TimeScale > 0) || math.IsInf(c.TimeScale, 0) {
		bad("interference.time_scale %v: want > 0", c.TimeScale)
	}
}

// domainInterference seeds the interfering client's text (see Mix).
const domainInterference uint64 = 0x1f

// InterferencePrompt is the interfering client's prompt number i of a run
// seeded seed: n generated tokens, opening with its own number so that no
// two share even their first block.
func InterferencePrompt(seed uint64, i, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "interference %d: ", i)
	appendWords(&b, Mix(domainInterference, seed, uint64(i)), max(n-3, 1))
	return strings.TrimSuffix(b.String(), " ")
}

// Defaults of BatchLoadConfig.
const (
	DefaultBatchPromptTokens = 512
	DefaultBatchOutputTokens = 16
	DefaultBatchDeadline     = Duration(5 * time.Minute)
)

// BatchLoadConfig is asynchronous work offered beside a run: one batch of
// chat completions submitted through the gateway's Batch API
// (POST /v1/files, POST /v1/batches) as the run starts, which the gateway
// runs in the lowest band on capacity its interactive and standard turns
// leave. The run's figures are its own; the batch is reported apart
// (driver.Result.BatchLoad): how many lines completed, and whether all of them did
// before the deadline. Off while Lines is 0.
type BatchLoadConfig struct {
	// Lines is the batch's number of requests. 0 (default): no batch.
	Lines int `json:"lines,omitempty" yaml:"lines"`
	// PromptTokens is each line's prompt, in generated tokens (about 4
	// bytes each). Default 512.
	PromptTokens int `json:"prompt_tokens,omitempty" yaml:"prompt_tokens"`
	// OutputTokens is each line's max_tokens. Default 16.
	OutputTokens int `json:"output_tokens,omitempty" yaml:"output_tokens"`
	// Deadline is how long after its submission the batch must be done;
	// the run waits for it up to then. Default 5m.
	Deadline Duration `json:"deadline,omitempty" yaml:"deadline"`
	// Key is the API key the batch is submitted with (a tenant of its
	// own); empty: Target.APIKey.
	Key string `json:"-" yaml:"key"`
}

func (c *BatchLoadConfig) ensureDefaults() {
	setDefault(&c.PromptTokens, DefaultBatchPromptTokens)
	setDefault(&c.OutputTokens, DefaultBatchOutputTokens)
	setDefault(&c.Deadline, DefaultBatchDeadline)
}

func (c *BatchLoadConfig) validate(bad func(string, ...any)) {
	if c.Lines < 0 || c.Lines > 50_000 {
		bad("batch_load.lines %d: want 0 to 50000 (the Batch API's limit)", c.Lines)
	}
	if c.PromptTokens < 1 || c.OutputTokens < 1 {
		bad("batch_load: prompt_tokens and output_tokens must be positive")
	}
	if c.Deadline.D() <= 0 {
		bad("batch_load.deadline %v: want > 0", c.Deadline.D())
	}
}

// domainBatch seeds the batch's text (see Mix).
const domainBatch uint64 = 0x2b

// BatchPrompt is the batch's line i of a run seeded seed: n generated
// tokens, opening with its own number.
func BatchPrompt(seed uint64, i, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "batch line %d: summarise: ", i)
	appendWords(&b, Mix(domainBatch, seed, uint64(i)), max(n-5, 1))
	return strings.TrimSuffix(b.String(), " ")
}
