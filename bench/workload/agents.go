package workload

import (
	"fmt"
	"math"
	"time"
)

// WorkloadAgents: coding-agent sessions drawn from the published
// distributions of agentic traces, N agents at once in phases of growing
// N (bench/scenario/agents).
const WorkloadAgents = "agents"

// Turn kinds of the agents workload, besides TurnOpen, TurnTool and
// TurnHuman.
const (
	// TurnSide is a side call: the session's system prompt and a short
	// request of its own, outside the main conversation (a title, a
	// classification), sharing only the system prompt with it.
	TurnSide TurnKind = "side"
	// TurnCompact asks for a summary of the whole conversation, whose
	// context has grown past AgentsConfig.CompactAtTokens.
	TurnCompact TurnKind = "compact"
	// TurnResume restarts the conversation after a compaction: the system
	// prompt, the summary and the next request, a new prefix.
	TurnResume TurnKind = "resume"
)

// Defaults of AgentsConfig. The session shape is that of the agentic
// traces inference-perf replays (agentic-trace-replay, 10,056 traces): 22
// calls a session on average, 49.1k input tokens a call, 659 output
// tokens, 92% of calls sharing a prefix with an earlier call (44.6k tokens
// on average), 61.7% of calls following a tool result, gaps capped at
// 15 s. DefaultAgentsToolResultTokens is the tool output that, with the
// answers carried along, grows the call-weighted mean input to about 49k
// (TestAgentsDistributions prints the plan's own figures).
const (
	DefaultAgentsPhaseDuration    = 30 * time.Second
	DefaultAgentsRamp             = 0.25
	DefaultAgentsTenants          = 4
	DefaultAgentsSystemTokens     = 4000
	DefaultAgentsToolSchemaTokens = 8000
	DefaultAgentsCalls            = 22
	DefaultAgentsOutputTokens     = 659
	DefaultAgentsToolResultTokens = 5500
	DefaultAgentsUserTokens       = 150
	DefaultAgentsToolShare        = 0.67
	DefaultAgentsSideShare        = 0.03
	DefaultAgentsSideTokens       = 800
	DefaultAgentsSideOutput       = 60
	DefaultAgentsCompactAt        = 110000
	DefaultAgentsSummaryTokens    = 2000
	DefaultAgentsGapMedian        = 2 * time.Second
	DefaultAgentsGapCap           = 15 * time.Second
	// DefaultAgentsMaxCallTokens bounds one draw of a heavy-tailed size
	// (tool result, answer): a tool result is cut, an answer stops.
	DefaultAgentsMaxCallTokens = 16384
)

// DefaultAgentsPhases are the agents a run keeps going in each phase: a
// size that two cores serve in minutes. The keynote's 100,400,1000 is a
// flag away (--phases).
var DefaultAgentsPhases = []int{10, 40, 100}

// AgentsConfig shapes the agents workload. Agents run closed loop: each
// runs one session after another, from when it arrives to the end of the
// last phase. Phase k keeps Phases[k] agents running; the agents it adds
// arrive spread over its first Ramp share. Sizes are drawn lognormal with
// the given means, so a few calls carry long tool outputs and answers.
// Durations are on the workload's clock, scaled by Agentic.TimeScale (the
// simulated fleet's time scale when embedded).
type AgentsConfig struct {
	// Phases are the agents running in each phase, non-decreasing.
	// Default 10,40,100.
	Phases []int `json:"phases" yaml:"phases"`
	// PhaseDuration is each phase's length. Default 30s.
	PhaseDuration Duration `json:"phase_duration" yaml:"phase_duration"`
	// Ramp is the share of a phase over which its new agents arrive, in
	// [0,1]. Default 0.25; negative: all at the phase's start.
	Ramp float64 `json:"ramp" yaml:"ramp"`
	// Tenants are the kinds of agent, each with a system prompt and tool
	// schema of its own that its sessions share. Default 4.
	Tenants int `json:"tenants" yaml:"tenants"`
	// SystemTokens and ToolSchemaTokens are each tenant's system prompt
	// and tool schema, in tokens. Defaults 4000 and 8000.
	SystemTokens     int `json:"system_tokens" yaml:"system_tokens"`
	ToolSchemaTokens int `json:"tool_schema_tokens" yaml:"tool_schema_tokens"`
	// Calls is the mean number of calls of a session, side calls and
	// compactions included; at least 2. Default 22.
	Calls int `json:"calls" yaml:"calls"`
	// OutputTokens is the mean answer of a main call. Default 659.
	OutputTokens int `json:"output_tokens" yaml:"output_tokens"`
	// ToolResultTokens is the mean tool output a tool call adds.
	// Default 5500.
	ToolResultTokens int `json:"tool_result_tokens" yaml:"tool_result_tokens"`
	// UserTokens is the mean user message. Default 150.
	UserTokens int `json:"user_tokens" yaml:"user_tokens"`
	// ToolShare is the share of calls continuing the conversation that
	// follow a tool result (the rest follow a user message). Default 0.67.
	ToolShare float64 `json:"tool_share" yaml:"tool_share"`
	// SideShare is the chance that a main call is followed by a side call.
	// Default 0.03; negative: none.
	SideShare float64 `json:"side_share" yaml:"side_share"`
	// SideTokens and SideOutputTokens are a side call's mean request and
	// answer. Defaults 800 and 60.
	SideTokens       int `json:"side_tokens" yaml:"side_tokens"`
	SideOutputTokens int `json:"side_output_tokens" yaml:"side_output_tokens"`
	// CompactAtTokens is the context past which a session compacts: a
	// call asks for a summary, and the conversation restarts from the
	// system prompt and the summary. Default 110000 (the 8B model's
	// context is 131,072).
	CompactAtTokens int `json:"compact_at_tokens" yaml:"compact_at_tokens"`
	// SummaryTokens is a compaction's summary. Default 2000.
	SummaryTokens int `json:"summary_tokens" yaml:"summary_tokens"`
	// GapMedian is the median pause before a call (a tool running, a
	// person reading); GapCap caps it. Defaults 2s and 15s.
	GapMedian Duration `json:"gap_median" yaml:"gap_median"`
	GapCap    Duration `json:"gap_cap" yaml:"gap_cap"`
	// MaxCallTokens caps one drawn size. Default 16384.
	MaxCallTokens int `json:"max_call_tokens" yaml:"max_call_tokens"`
	// PrefillTokensPerSecond is one replica's modelled prefill rate, on
	// the fleet's clock, for the TTFT floor; 0: no floor reported. The
	// embedded fleet's is set from its roofline.
	PrefillTokensPerSecond float64 `json:"prefill_tokens_per_second,omitempty" yaml:"prefill_tokens_per_second"`
	// ProfileDir, when set, keeps each phase's CPU profile of the bench's
	// process there, as phase-K-LABEL.pprof (the bench's goroutines
	// labelled turnpike-bench=client), and its heap profile at the
	// phase's end, as phase-K-LABEL.heap.pprof, for go tool pprof.
	ProfileDir string `json:"profile_dir,omitempty" yaml:"profile_dir"`
}

func (c *AgentsConfig) ensureDefaults() {
	if len(c.Phases) == 0 {
		c.Phases = append([]int(nil), DefaultAgentsPhases...)
	}
	setDefault(&c.PhaseDuration, Duration(DefaultAgentsPhaseDuration))
	setDefault(&c.Ramp, DefaultAgentsRamp)
	setDefault(&c.Tenants, DefaultAgentsTenants)
	setDefault(&c.SystemTokens, DefaultAgentsSystemTokens)
	setDefault(&c.ToolSchemaTokens, DefaultAgentsToolSchemaTokens)
	setDefault(&c.Calls, DefaultAgentsCalls)
	setDefault(&c.OutputTokens, DefaultAgentsOutputTokens)
	setDefault(&c.ToolResultTokens, DefaultAgentsToolResultTokens)
	setDefault(&c.UserTokens, DefaultAgentsUserTokens)
	setDefault(&c.ToolShare, DefaultAgentsToolShare)
	setDefault(&c.SideShare, DefaultAgentsSideShare)
	setDefault(&c.SideTokens, DefaultAgentsSideTokens)
	setDefault(&c.SideOutputTokens, DefaultAgentsSideOutput)
	setDefault(&c.CompactAtTokens, DefaultAgentsCompactAt)
	setDefault(&c.SummaryTokens, DefaultAgentsSummaryTokens)
	setDefault(&c.GapMedian, Duration(DefaultAgentsGapMedian))
	setDefault(&c.GapCap, Duration(DefaultAgentsGapCap))
	setDefault(&c.MaxCallTokens, DefaultAgentsMaxCallTokens)
}

func (c *AgentsConfig) validate(bad func(string, ...any)) {
	for i, n := range c.Phases {
		if n < 1 || i > 0 && n < c.Phases[i-1] {
			bad("agents.phases %v: want positive agent counts, none fewer than the phase before", c.Phases)
			break
		}
	}
	if c.PhaseDuration <= 0 || c.GapMedian <= 0 || c.GapCap <= 0 {
		bad("agents: phase_duration, gap_median and gap_cap must be positive")
	}
	if c.Ramp > 1 || math.IsNaN(c.Ramp) {
		bad("agents.ramp %v: want <= 1", c.Ramp)
	}
	if c.Calls < 2 {
		bad("agents.calls %d: want >= 2", c.Calls)
	}
	if c.Tenants < 1 || c.OutputTokens < 1 || c.ToolResultTokens < 1 || c.UserTokens < 1 ||
		c.SideTokens < 1 || c.SideOutputTokens < 1 || c.SummaryTokens < 1 || c.MaxCallTokens < 1 {
		bad("agents: tenants and every token size must be >= 1")
	}
	if c.SystemTokens < 0 || c.ToolSchemaTokens < 0 {
		bad("agents: system_tokens and tool_schema_tokens must be >= 0")
	}
	if !(c.ToolShare >= 0 && c.ToolShare <= 1) || c.SideShare > 1 || math.IsNaN(c.SideShare) {
		bad("agents: tool_share %v and side_share %v: want shares of at most 1", c.ToolShare, c.SideShare)
	}
	if c.CompactAtTokens <= c.SystemTokens+c.ToolSchemaTokens+c.SummaryTokens {
		bad("agents.compact_at_tokens %d: want more than the system prompt, tool schema and summary", c.CompactAtTokens)
	}
	if c.PrefillTokensPerSecond < 0 || math.IsInf(c.PrefillTokensPerSecond, 0) {
		bad("agents.prefill_tokens_per_second %v: want >= 0", c.PrefillTokensPerSecond)
	}
}

// AgentArrival is when agent i starts its first session, from the run's
// start, on the workload's clock scaled by scale: agents of phase k arrive
// evenly over the first Ramp share of it.
func (c AgentsConfig) AgentArrival(i int, scale float64) time.Duration {
	prev := 0
	for k, n := range c.Phases {
		if i < n {
			start := float64(k) * float64(c.PhaseDuration)
			if ramp := max(c.Ramp, 0); ramp > 0 {
				start += float64(i-prev) / float64(n-prev) * ramp * float64(c.PhaseDuration)
			}
			return time.Duration(start * scale)
		}
		prev = n
	}
	return -1
}

// AgentSession is the n-th session agent runs: a pure function of the
// config's seed, the agent and n. Its first turn opens the conversation
// (the tenant's system prompt and a task); each later one continues it
// (a tool result or a user message after a gap), asks for a summary once
// the context has grown past CompactAtTokens and then resumes from it, or
// is a side call that shares only the system prompt. Delays are scaled by
// scale (0: unscaled).
func AgentSession(cfg Config, agent, n int, scale float64) Session {
	a := cfg.Agents
	if scale <= 0 {
		scale = DefaultTimeScale
	}
	seed := Mix(uint64(cfg.Seed), 0xa6e7, uint64(agent), uint64(n))
	g := Rand(seed)
	uniform := func() float64 { return float64(g.Next()>>11) / (1 << 53) }
	// lognormal draws a size of the given mean: sigma 1, so the median
	// is about 0.6 of the mean and one draw in 50 exceeds 4× it.
	lognormal := func(mean float64, sigma float64) float64 {
		return mean * math.Exp(sigma*normal(uniform)-sigma*sigma/2)
	}
	size := func(mean int) int {
		return min(max(int(math.Round(lognormal(float64(mean), 1))), 1), a.MaxCallTokens)
	}
	gap := func() time.Duration {
		d := min(time.Duration(float64(a.GapMedian)*math.Exp(normal(uniform))), a.GapCap.D())
		return time.Duration(float64(d) * scale)
	}
	s := Session{
		ID:     fmt.Sprintf("a%04d-%d-%x", agent, n, seed&0xffffff),
		Tenant: int(Mix(seed, 1) % uint64(max(a.Tenants, 1))),
	}
	// The session's calls: at least 2, mean Calls (sigma 0.6).
	calls := min(max(int(math.Round(lognormal(float64(a.Calls), 0.6))), 2), 20*a.Calls)
	system := SystemPrompt(s.Tenant, a.SystemTokens, a.ToolSchemaTokens)
	prefix := a.SystemTokens + a.ToolSchemaTokens
	context := 0 // tokens of the conversation so far, with answers
	for t := 0; len(s.Turns) < calls; t++ {
		var turn Turn
		output := size(a.OutputTokens)
		switch {
		case t == 0:
			user := size(a.UserTokens)
			turn = Turn{Kind: TurnOpen, Input: []Item{
				{Kind: ItemMessage, Role: "system", Text: system},
				{Kind: ItemMessage, Role: "user", Text: fmt.Sprintf("Task %s: ", s.ID) + words(Mix(domainUser, seed, 0), user)},
			}}
			context = prefix + user
		case s.Turns[len(s.Turns)-1].Kind == TurnCompact:
			user := size(a.UserTokens)
			turn = Turn{Kind: TurnResume, Delay: gap(), Input: []Item{
				{Kind: ItemMessage, Role: "system", Text: system},
				{Kind: ItemMessage, Role: "user", Text: fmt.Sprintf("Summary of session %s so far: ", s.ID) + words(Mix(domainTool, seed, uint64(t)), a.SummaryTokens)},
				{Kind: ItemMessage, Role: "user", Text: words(Mix(domainUser, seed, uint64(t)), user)},
			}}
			context = prefix + a.SummaryTokens + user
		case context > a.CompactAtTokens:
			turn = Turn{Kind: TurnCompact, Delay: gap(), Input: []Item{
				{Kind: ItemMessage, Role: "user", Text: "Summarize the conversation so far for a fresh context: " + words(Mix(domainUser, seed, uint64(t)), 12)},
			}}
			output = a.SummaryTokens
		case uniform() < a.ToolShare:
			result := size(a.ToolResultTokens)
			turn = Turn{Kind: TurnTool, Delay: gap(), Input: toolResult(ToolResultFunctionCall, seed, s.ID, t, result)}
			context += result
		default:
			user := size(a.UserTokens)
			turn = Turn{Kind: TurnHuman, Delay: gap(), Input: []Item{{Kind: ItemMessage, Role: "user", Text: words(Mix(domainUser, seed, uint64(t)), user)}}}
			context += user
		}
		turn.MaxOutputTokens = output
		context += output
		s.Turns = append(s.Turns, turn)
		if len(s.Turns) < calls && turn.Kind != TurnCompact && uniform() < a.SideShare {
			s.Turns = append(s.Turns, Turn{Kind: TurnSide, MaxOutputTokens: size(a.SideOutputTokens), Input: []Item{
				{Kind: ItemMessage, Role: "system", Text: system},
				{Kind: ItemMessage, Role: "user", Text: fmt.Sprintf("Side request %d of %s: ", t, s.ID) + words(Mix(domainArgs, seed, uint64(t)), size(a.SideTokens))},
			}})
		}
	}
	return s
}

// normal maps two uniform draws to a standard normal one (Box–Muller).
func normal(uniform func() float64) float64 {
	u1, u2 := max(uniform(), 1e-12), uniform()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// Continues reports whether a turn of kind k extends the conversation of
// the turn before it (sent chained to it), rather than starting one
// (TurnOpen, TurnResume) or standing apart (TurnSide).
func (k TurnKind) Continues() bool {
	switch k {
	case TurnOpen, TurnResume, TurnSide, TurnSingle:
		return false
	}
	return true
}
