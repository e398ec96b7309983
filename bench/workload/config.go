package workload

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// Workload names accepted in Config.Workload.
const (
	WorkloadAgentic   = "agentic"
	WorkloadTrace     = "trace"
	WorkloadIsolation = "isolation"
	WorkloadChaos     = "chaos"
	// WorkloadLending: a simulated trainer on a lendable pool, with and
	// without lending its idle phases to background work
	// (bench/scenario/lending).
	WorkloadLending = "lending"
)

// API names accepted in Config.API.
const (
	APIResponses = "responses"
	APIChat      = "chat"
)

// Tool-result encodings accepted in AgenticConfig.ToolResultFormat.
const (
	// ToolResultFunctionCall sends each tool result as a function_call item
	// followed by its function_call_output (an assistant tool_calls message and
	// a tool message on chat completions), the shape a real agent replays.
	ToolResultFunctionCall = "function_call"
	// ToolResultMessage sends each tool result as plain user text, for gateways
	// or engines that reject tool items.
	ToolResultMessage = "message"
)

// Priority bands, the values of the x-turnpike-priority header.
const (
	BandInteractive = "interactive"
	BandStandard    = "standard"
	BandBackground  = "background"
	// BandUnset labels requests sent without a priority header; the gateway
	// classifies them itself.
	BandUnset = "unset"
)

// Defaults applied by Config.EnsureDefaults to zero fields.
const (
	DefaultWorkload       = WorkloadAgentic
	DefaultAPI            = APIResponses
	DefaultModel          = "turnpike-sim"
	DefaultRequestTimeout = 2 * time.Minute
	DefaultSeed           = 1

	DefaultSessions           = 32
	DefaultTurnsPerSession    = 8
	DefaultTenants            = 2
	DefaultSystemPromptTokens = 3000
	DefaultToolSchemaTokens   = 1500
	DefaultToolResultTokens   = 400
	DefaultUserTurnTokens     = 40
	DefaultOutputTokens       = 64
	DefaultHumanTurnShare     = 0.2
	DefaultThinkTime          = 3 * time.Second
	DefaultLoopGap            = 300 * time.Millisecond
	DefaultWaves              = 4
	DefaultWaveInterval       = 2 * time.Second

	DefaultTracePath = "../shared/workloads/mooncake/conversation_trace.jsonl"
	DefaultTimeScale = 1.0

	DefaultIsolationDuration  = 90 * time.Second
	DefaultIsolationARate     = 2.0
	DefaultIsolationFleetSlot = 16
	DefaultBurstMultiple      = 5.0
	DefaultIsolationRounds    = 3
	DefaultIsolationSettle    = 0.2

	// The chaos schedule's defaults fit a 60s run: five rounds, each
	// replica of four killed at least once, every restart given a breaker
	// timeout (the gateway's default breakerOpenFor) to take traffic again
	// before the run ends.
	DefaultChaosFirstKill    = 5 * time.Second
	DefaultChaosKillInterval = 10 * time.Second
	DefaultChaosDowntime     = 3 * time.Second
	DefaultChaosAtOnce       = 1
	DefaultChaosRejoinGoal   = 10 * time.Second
)

// Duration is a time.Duration that reads and writes as text ("300ms", "2s")
// in JSON and YAML. Convert with time.Duration(d); flags can bind through
// (*time.Duration)(&cfg.Field).
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration string ("1.5s"); a bare number is seconds.
func (d *Duration) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "" {
		*d = 0
		return nil
	}
	if v, err := time.ParseDuration(s); err == nil {
		*d = Duration(v)
		return nil
	}
	var secs float64
	if _, err := fmt.Sscanf(s, "%g", &secs); err != nil || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return fmt.Errorf("bench: invalid duration %q", s)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// Config describes one benchmark run. The zero value is usable after
// EnsureDefaults; every field's comment gives its default and unit.
type Config struct {
	// Workload is "agentic" (default), "trace", "isolation", "chaos",
	// "long-prompt" or "overload".
	Workload string `json:"workload" yaml:"workload"`
	// API is "responses" (default: Responses API chained with
	// previous_response_id, only new input sent each turn) or "chat" (chat
	// completions with the full history and an x-session-id header). The trace
	// workload always uses chat completions.
	API string `json:"api" yaml:"api"`
	// Model is the model name sent with every request. Default "turnpike-sim".
	Model string `json:"model" yaml:"model"`
	// Seed makes the workload deterministic: same seed, same sessions, same
	// text, same gaps. Default 1.
	Seed int64 `json:"seed" yaml:"seed"`
	// Rate caps requests started per second across the whole run. 0: no cap.
	Rate float64 `json:"rate" yaml:"rate"`
	// MaxInFlight caps requests in flight at once. 0: no cap.
	MaxInFlight int `json:"max_in_flight" yaml:"max_in_flight"`
	// RequestTimeout bounds one request, first byte to last. Default 2m.
	RequestTimeout Duration `json:"request_timeout" yaml:"request_timeout"`
	// MaxDuration stops starting new requests after this long; requests in
	// flight finish. 0: run the whole workload.
	MaxDuration Duration `json:"max_duration" yaml:"max_duration"`
	// TenantKeys are the API keys of tenants 0, 1, ... in order; a tenant
	// beyond the list uses Target.APIKey. Empty: every tenant uses Target.APIKey.
	TenantKeys []string `json:"-" yaml:"tenant_keys"`
	// Priority is sent as x-turnpike-priority on every request of the agentic
	// and trace workloads: "interactive", "standard", "background", or ""
	// (default: no header, the gateway classifies).
	Priority string `json:"priority,omitempty" yaml:"priority"`
	// FreeOutputLength stops asking chat-completions engines for exactly the
	// requested number of tokens (ignore_eos, min_tokens). Default false: ask.
	FreeOutputLength bool `json:"free_output_length,omitempty" yaml:"free_output_length"`
	// KeepSamples puts every request's record in the Result's Samples.
	// Default false.
	KeepSamples bool `json:"keep_samples,omitempty" yaml:"keep_samples"`
	// Progress receives the progress bar. nil: os.Stderr; io.Discard: none.
	Progress io.Writer `json:"-" yaml:"-"`

	Agentic   AgenticConfig   `json:"agentic" yaml:"agentic"`
	Trace     TraceConfig     `json:"trace" yaml:"trace"`
	Isolation IsolationConfig `json:"isolation" yaml:"isolation"`
	Chaos     ChaosConfig     `json:"chaos" yaml:"chaos"`
	// LongPrompt is the long-prompt workload (WorkloadLongPrompt).
	LongPrompt LongPromptConfig `json:"long_prompt" yaml:"long_prompt"`
	// Interference is a client sending straight to the engines beside the
	// agentic and trace workloads; off by default.
	Interference InterferenceConfig `json:"interference,omitzero" yaml:"interference"`
	// BatchLoad is a batch submitted through the Batch API beside the run
	// (in the isolation scenario: as tenant B's burst starts); off by
	// default.
	BatchLoad BatchLoadConfig `json:"batch_load,omitzero" yaml:"batch_load"`
	// Overload is the overload scenario (WorkloadOverload).
	Overload OverloadConfig `json:"overload" yaml:"overload"`
	// Lending is the lending workload (WorkloadLending).
	Lending LendingConfig `json:"lending" yaml:"lending"`
	// LoRA is the lora workload (WorkloadLoRA).
	LoRA LoRAConfig `json:"lora" yaml:"lora"`
	// Agents is the agents workload (WorkloadAgents).
	Agents AgentsConfig `json:"agents" yaml:"agents"`
}

// AgenticConfig shapes the agentic workload: tenants with a shared system
// prompt and tool schema, sessions whose context grows every turn.
type AgenticConfig struct {
	// Sessions is the number of agent sessions. Default 32.
	Sessions int `json:"sessions" yaml:"sessions"`
	// TurnsPerSession is the number of requests each session sends. Default 8.
	TurnsPerSession int `json:"turns_per_session" yaml:"turns_per_session"`
	// Tenants is the number of tenants; sessions are dealt to them in turn,
	// and each tenant has its own system prompt and tool schema. Default 2.
	Tenants int `json:"tenants" yaml:"tenants"`
	// SystemPromptTokens is the size of each tenant's system prompt, in tokens
	// (about 4 bytes each). Default 3000.
	SystemPromptTokens int `json:"system_prompt_tokens" yaml:"system_prompt_tokens"`
	// ToolSchemaTokens is the size of each tenant's tool schema, appended to
	// the system prompt, in tokens. Default 1500.
	ToolSchemaTokens int `json:"tool_schema_tokens" yaml:"tool_schema_tokens"`
	// ToolResultTokens is the size of the tool result appended by each
	// tool-loop turn, in tokens. Default 400.
	ToolResultTokens int `json:"tool_result_tokens" yaml:"tool_result_tokens"`
	// UserTurnTokens is the size of a human message, in tokens. Default 40.
	UserTurnTokens int `json:"user_turn_tokens" yaml:"user_turn_tokens"`
	// OutputTokens is max_output_tokens of every turn. Default 64.
	OutputTokens int `json:"output_tokens" yaml:"output_tokens"`
	// HumanTurnShare is the share of turns after the first that are human
	// turns (think time, a user message) rather than tool-loop turns, in
	// [0,1]. Default 0.2; a negative value means none.
	HumanTurnShare float64 `json:"human_turn_share" yaml:"human_turn_share"`
	// ThinkTime is the mean pause before a human turn (drawn uniformly from
	// 0.5× to 1.5×). Default 3s.
	ThinkTime Duration `json:"think_time" yaml:"think_time"`
	// LoopGap is the mean pause between tool-loop turns (0.5× to 1.5×).
	// Default 300ms.
	LoopGap Duration `json:"loop_gap" yaml:"loop_gap"`
	// Waves is the number of bursts sessions start in. Default 4.
	Waves int `json:"waves" yaml:"waves"`
	// WaveInterval is the time between waves. Default 2s.
	WaveInterval Duration `json:"wave_interval" yaml:"wave_interval"`
	// ToolResultFormat is "function_call" (default) or "message".
	ToolResultFormat string `json:"tool_result_format" yaml:"tool_result_format"`
	// TimeScale multiplies every planned delay (wave interval, think time,
	// loop gap), like TraceConfig.TimeScale: 0.1 runs the workload's clock
	// ten times faster. Give it the simulated fleet's time scale to keep
	// gaps and engine steps on one clock. Default 1.
	TimeScale float64 `json:"time_scale" yaml:"time_scale"`
	// Concurrency, when > 0, runs the workload closed loop: at most this
	// many sessions at once, the next planned session starting as soon as
	// one ends (Waves and WaveInterval are then unused), so the fleet, not
	// the workload's clock, sets the pace; turns within a session still wait
	// their (scaled) gaps. 0 (default): open loop, sessions start in waves.
	Concurrency int `json:"concurrency,omitempty" yaml:"concurrency"`
}

// TraceConfig shapes the trace replay workload.
type TraceConfig struct {
	// Path is the Mooncake-format JSONL trace. Default
	// "../shared/workloads/mooncake/conversation_trace.jsonl".
	Path string `json:"path" yaml:"path"`
	// TimeScale multiplies every timestamp: 0.1 replays ten times faster.
	// Default 1.
	TimeScale float64 `json:"time_scale" yaml:"time_scale"`
	// Limit takes only the first Limit requests (after the window). 0: all.
	Limit int `json:"limit" yaml:"limit"`
	// WindowStart and WindowEnd keep requests whose trace timestamp lies in
	// [WindowStart, WindowEnd), in trace time; replay starts at WindowStart.
	// Zero WindowEnd: to the end of the trace.
	WindowStart Duration `json:"window_start" yaml:"window_start"`
	WindowEnd   Duration `json:"window_end" yaml:"window_end"`
	// MaxOutputTokens caps each request's output_length. 0: no cap.
	MaxOutputTokens int `json:"max_output_tokens" yaml:"max_output_tokens"`
}

// IsolationConfig shapes the isolation scenario: tenant A's interactive
// turns at a steady rate, with and without tenant B's agent burst, in one
// run that alternates the two (bench/scenario/isolation).
type IsolationConfig struct {
	// KeyA and KeyB are the two tenants' API keys. Empty: Target.APIKey.
	KeyA string `json:"-" yaml:"key_a"`
	KeyB string `json:"-" yaml:"key_b"`
	// Duration is how long A is measured alone, and how long under B's
	// burst, each in Rounds stretches. Default 90s: at ARate's 2, A's
	// figures hold 180 turns each, so that its p99 is a percentile and not
	// its slowest turn.
	Duration Duration `json:"duration" yaml:"duration"`
	// Rounds is how many times the run goes from A alone to A under the
	// burst. Default 3: a host that slows for a minute slows both
	// conditions, not one, as it would when each had a run of its own.
	Rounds int `json:"rounds" yaml:"rounds"`
	// ARate is tenant A's interactive turns per second. Default 2.
	ARate float64 `json:"a_rate" yaml:"a_rate"`
	// FleetSlots is how many sequences the fleet runs at once (the sum of the
	// engines' batch limits). Default 16.
	FleetSlots int `json:"fleet_slots" yaml:"fleet_slots"`
	// BurstMultiple is how many agent loops B keeps in flight, as a multiple
	// of FleetSlots. Default 5.
	BurstMultiple float64 `json:"burst_multiple" yaml:"burst_multiple"`
	// Settle is the least warm-up before A's first stretch alone, and the
	// least pause after each burst, as a share of a stretch
	// (Duration/Rounds); the warm-up also lasts until A's first turn has
	// ended, the pause until B's last request has. Default 0.2.
	Settle float64 `json:"settle" yaml:"settle"`
	// BPriority is the x-turnpike-priority B sends; "" (default) sends none.
	BPriority string `json:"b_priority,omitempty" yaml:"b_priority"`
}

// ChaosConfig is the chaos workload's schedule: the agentic sessions run,
// half on chat completions and half on the Responses API, while replicas
// are killed and restarted (Target.Replicas). Round k kills AtOnce
// replicas, taken in turn, at FirstKill + k × KillInterval and restarts
// them Downtime later. Times are wall time, not the simulated fleet's:
// the gateway's breaker and health timers run on the wall clock.
type ChaosConfig struct {
	// FirstKill is when the first round kills, from the run's start.
	// Default 5s.
	FirstKill Duration `json:"first_kill" yaml:"first_kill"`
	// KillInterval is the time between rounds. Default 10s.
	KillInterval Duration `json:"kill_interval" yaml:"kill_interval"`
	// Downtime is how long a killed replica stays down; less than
	// KillInterval. Default 3s.
	Downtime Duration `json:"downtime" yaml:"downtime"`
	// AtOnce is how many replicas one round kills; fewer than the fleet
	// has. Default 1.
	AtOnce int `json:"at_once" yaml:"at_once"`
	// Rounds caps the number of rounds. 0 (default): as many as fit, with
	// MaxDuration, a round fitting when its replicas are back RejoinGoal
	// before the end; without MaxDuration, rounds go on until the
	// workload ends.
	Rounds int `json:"rounds,omitempty" yaml:"rounds"`
	// RejoinGoal is how soon a restarted replica should take traffic again:
	// one breaker timeout of the gateway (its breakerOpenFor). Default 10s.
	RejoinGoal Duration `json:"rejoin_goal" yaml:"rejoin_goal"`
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	setDefault(&c.Workload, DefaultWorkload)
	setDefault(&c.API, DefaultAPI)
	setDefault(&c.Model, DefaultModel)
	setDefault(&c.Seed, DefaultSeed)
	setDefault(&c.RequestTimeout, Duration(DefaultRequestTimeout))
	c.LongPrompt.ensureDefaults()
	c.Interference.ensureDefaults()
	c.BatchLoad.ensureDefaults()
	c.Overload.ensureDefaults()
	c.Lending.ensureDefaults()
	c.LoRA.ensureDefaults()
	c.Agents.ensureDefaults()

	a := &c.Agentic
	setDefault(&a.Sessions, DefaultSessions)
	setDefault(&a.TurnsPerSession, DefaultTurnsPerSession)
	setDefault(&a.Tenants, DefaultTenants)
	setDefault(&a.SystemPromptTokens, DefaultSystemPromptTokens)
	setDefault(&a.ToolSchemaTokens, DefaultToolSchemaTokens)
	setDefault(&a.ToolResultTokens, DefaultToolResultTokens)
	setDefault(&a.UserTurnTokens, DefaultUserTurnTokens)
	setDefault(&a.OutputTokens, DefaultOutputTokens)
	setDefault(&a.HumanTurnShare, DefaultHumanTurnShare)
	setDefault(&a.ThinkTime, Duration(DefaultThinkTime))
	setDefault(&a.LoopGap, Duration(DefaultLoopGap))
	setDefault(&a.Waves, DefaultWaves)
	setDefault(&a.WaveInterval, Duration(DefaultWaveInterval))
	setDefault(&a.ToolResultFormat, ToolResultFunctionCall)
	setDefault(&a.TimeScale, DefaultTimeScale)

	t := &c.Trace
	setDefault(&t.Path, DefaultTracePath)
	setDefault(&t.TimeScale, DefaultTimeScale)

	i := &c.Isolation
	setDefault(&i.Duration, Duration(DefaultIsolationDuration))
	setDefault(&i.ARate, DefaultIsolationARate)
	setDefault(&i.FleetSlots, DefaultIsolationFleetSlot)
	setDefault(&i.BurstMultiple, DefaultBurstMultiple)
	setDefault(&i.Rounds, DefaultIsolationRounds)
	setDefault(&i.Settle, DefaultIsolationSettle)

	ch := &c.Chaos
	setDefault(&ch.FirstKill, Duration(DefaultChaosFirstKill))
	setDefault(&ch.KillInterval, Duration(DefaultChaosKillInterval))
	setDefault(&ch.Downtime, Duration(DefaultChaosDowntime))
	setDefault(&ch.AtOnce, DefaultChaosAtOnce)
	setDefault(&ch.RejoinGoal, Duration(DefaultChaosRejoinGoal))
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports every problem with c at once. Call EnsureDefaults first.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("bench: "+format, args...))
	}
	switch c.Workload {
	case WorkloadAgentic, WorkloadTrace, WorkloadIsolation, WorkloadChaos, WorkloadLongPrompt, WorkloadOverload, WorkloadLending, WorkloadLoRA, WorkloadAgents:
	default:
		bad("workload %q: want agentic, trace, isolation, chaos, long-prompt, overload, lending, lora or agents", c.Workload)
	}
	c.LongPrompt.validate(bad)
	c.Interference.validate(bad)
	c.BatchLoad.validate(bad)
	switch {
	case c.BatchLoad.Lines == 0:
	case c.Workload == WorkloadChaos:
		bad("a batch beside the chaos workload: its replicas' kills would be the batch's retries; run it with another workload")
	case c.Workload == WorkloadOverload || c.Workload == WorkloadLending:
		// Each of their phases is a run of its own, and each would get
		// a batch; their own background work is what they measure.
		bad("a batch beside the %s workload: it runs in phases, each of which would submit one; run it with agentic, trace, long-prompt or isolation", c.Workload)
	}
	if c.Interference.Rate > 0 && c.Workload != WorkloadAgentic && c.Workload != WorkloadTrace {
		bad("interference runs beside the agentic and trace workloads, not %s", c.Workload)
	}
	c.Overload.validate(bad)
	c.Lending.validate(bad)
	c.LoRA.validate(bad)
	c.Agents.validate(bad)
	if c.Workload == WorkloadAgents && c.API != APIResponses {
		bad("the agents workload chains its calls with previous_response_id: api %q, want responses", c.API)
	}
	switch c.API {
	case APIResponses, APIChat:
	default:
		bad("api %q: want responses or chat", c.API)
	}
	if !validPriority(c.Priority) {
		bad("priority %q: want interactive, standard, background or empty", c.Priority)
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		bad("rate %v: want >= 0", c.Rate)
	}
	if c.MaxInFlight < 0 {
		bad("max_in_flight %d: want >= 0", c.MaxInFlight)
	}
	if c.RequestTimeout < 0 || c.MaxDuration < 0 {
		bad("request_timeout and max_duration must be >= 0")
	}

	a := c.Agentic
	for _, f := range []struct {
		name string
		v    int
	}{
		{"sessions", a.Sessions}, {"turns_per_session", a.TurnsPerSession},
		{"tenants", a.Tenants}, {"output_tokens", a.OutputTokens}, {"waves", a.Waves},
	} {
		if f.v < 1 {
			bad("agentic.%s %d: want >= 1", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"system_prompt_tokens", a.SystemPromptTokens}, {"tool_schema_tokens", a.ToolSchemaTokens},
		{"tool_result_tokens", a.ToolResultTokens}, {"user_turn_tokens", a.UserTurnTokens},
	} {
		if f.v < 0 {
			bad("agentic.%s %d: want >= 0", f.name, f.v)
		}
	}
	if a.HumanTurnShare > 1 || math.IsNaN(a.HumanTurnShare) {
		bad("agentic.human_turn_share %v: want <= 1", a.HumanTurnShare)
	}
	if a.ThinkTime < 0 || a.LoopGap < 0 || a.WaveInterval < 0 {
		bad("agentic think_time, loop_gap and wave_interval must be >= 0")
	}
	if !(a.TimeScale > 0) || math.IsInf(a.TimeScale, 0) {
		bad("agentic.time_scale %v: want > 0", a.TimeScale)
	}
	if a.Concurrency < 0 {
		bad("agentic.concurrency %d: want >= 0", a.Concurrency)
	}
	switch a.ToolResultFormat {
	case ToolResultFunctionCall, ToolResultMessage:
	default:
		bad("agentic.tool_result_format %q: want function_call or message", a.ToolResultFormat)
	}

	t := c.Trace
	if c.Workload == WorkloadTrace && t.Path == "" {
		bad("trace.path is empty")
	}
	if !(t.TimeScale > 0) || math.IsInf(t.TimeScale, 0) {
		bad("trace.time_scale %v: want > 0", t.TimeScale)
	}
	if t.Limit < 0 || t.MaxOutputTokens < 0 {
		bad("trace.limit and trace.max_output_tokens must be >= 0")
	}
	if t.WindowStart < 0 || (t.WindowEnd != 0 && t.WindowEnd <= t.WindowStart) {
		bad("trace window [%v, %v) is empty or negative", t.WindowStart, t.WindowEnd)
	}

	i := c.Isolation
	if i.Duration <= 0 {
		bad("isolation.duration %v: want > 0", i.Duration)
	}
	if !(i.ARate > 0) || math.IsInf(i.ARate, 0) {
		bad("isolation.a_rate %v: want > 0", i.ARate)
	}
	if i.FleetSlots < 1 {
		bad("isolation.fleet_slots %d: want >= 1", i.FleetSlots)
	}
	if !(i.BurstMultiple > 0) || math.IsInf(i.BurstMultiple, 0) {
		bad("isolation.burst_multiple %v: want > 0", i.BurstMultiple)
	}
	if i.Rounds < 1 || i.Rounds > 100 {
		bad("isolation.rounds %d: want 1 to 100", i.Rounds)
	}
	if !(i.Settle >= 0 && i.Settle < 1) {
		bad("isolation.settle %v: want in [0,1)", i.Settle)
	}
	if !validPriority(i.BPriority) {
		bad("isolation.b_priority %q: want interactive, standard, background or empty", i.BPriority)
	}

	ch := c.Chaos
	if ch.FirstKill < 0 {
		bad("chaos.first_kill %v: want >= 0", ch.FirstKill)
	}
	if ch.Downtime <= 0 || ch.KillInterval <= ch.Downtime {
		bad("chaos.downtime %v and kill_interval %v: want 0 < downtime < kill_interval", ch.Downtime, ch.KillInterval)
	}
	if ch.AtOnce < 1 {
		bad("chaos.at_once %d: want >= 1", ch.AtOnce)
	}
	if ch.Rounds < 0 {
		bad("chaos.rounds %d: want >= 0", ch.Rounds)
	}
	if ch.RejoinGoal <= 0 {
		bad("chaos.rejoin_goal %v: want > 0", ch.RejoinGoal)
	}
	return errors.Join(errs...)
}

func validPriority(p string) bool {
	switch p {
	case "", BandInteractive, BandStandard, BandBackground:
		return true
	}
	return false
}
