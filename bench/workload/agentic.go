package workload

import (
	"fmt"
	"strings"
	"time"
)

// TurnKind says why a turn was sent.
type TurnKind string

// Turn kinds.
const (
	// TurnOpen is a session's first turn: system prompt and a user task.
	TurnOpen TurnKind = "open"
	// TurnTool is a tool-loop turn: the agent appends a tool result after a
	// sub-second gap.
	TurnTool TurnKind = "tool"
	// TurnHuman is a human turn: a user message after think time.
	TurnHuman TurnKind = "human"
	// TurnSingle is a one-shot request (trace replay, isolation tenant A).
	TurnSingle TurnKind = "single"
)

// ItemKind is the kind of one input item.
type ItemKind string

// Input item kinds, mirroring the Responses API's input items.
const (
	ItemMessage            ItemKind = "message"
	ItemFunctionCall       ItemKind = "function_call"
	ItemFunctionCallOutput ItemKind = "function_call_output"
)

// Item is one piece of new input a turn sends: a message, or a function call
// and its output.
type Item struct {
	Kind ItemKind `json:"kind"`
	// Role of a message: "system", "user" or "assistant".
	Role string `json:"role,omitempty"`
	// Text is the message text, the call's output, or the call's arguments.
	Text string `json:"text"`
	// CallID ties a function_call to its function_call_output.
	CallID string `json:"call_id,omitempty"`
	// Name is the function called.
	Name string `json:"name,omitempty"`
}

// Turn is one request of a session.
type Turn struct {
	Kind TurnKind `json:"kind"`
	// Delay is the pause before the turn is sent: after the previous turn
	// ended, or after the session's start for its first turn.
	Delay time.Duration `json:"delay"`
	// Input is the new input this turn adds to the conversation.
	Input []Item `json:"input"`
	// MaxOutputTokens is the output the turn asks for.
	MaxOutputTokens int `json:"max_output_tokens"`
}

// Session is a planned conversation: one tenant, turns sent one after
// another, each waiting for the previous to end.
type Session struct {
	ID     string `json:"id"`
	Tenant int    `json:"tenant"`
	// Start is when the session's first turn becomes due, from the run
	// start; 0 in closed loop, where a session starts when a slot frees.
	Start time.Duration `json:"start"`
	// API is the API the session's turns use; "" is Config.API.
	API string `json:"api,omitempty"`
	// Model is the model the session's turns ask for; "" is
	// Config.Model.
	Model string `json:"model,omitempty"`
	Turns []Turn `json:"turns"`
}

// SystemPrompt returns tenant's shared system prompt and tool schema:
// systemTokens of instructions then schemaTokens of tool schema, the same
// for every session of the tenant and every seed of the run, so that it is a
// prefix engines can share.
func SystemPrompt(tenant, systemTokens, schemaTokens int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are agent of tenant %d.\n", tenant)
	b.WriteString(words(Mix(domainSystem, uint64(tenant)), systemTokens))
	if schemaTokens > 0 {
		b.WriteString("\n# Tools\n")
		b.WriteString(words(Mix(domainSchema, uint64(tenant)), schemaTokens))
	}
	return b.String()
}

// toolNames are the functions agent sessions pretend to call.
var toolNames = []string{"read_file", "grep", "run_tests", "list_dir", "edit_file", "web_fetch"}

// PlanAgentic builds the agentic workload's sessions from cfg (after
// EnsureDefaults). The plan is a pure function of cfg: the same seed gives
// the same sessions, gaps and text.
func PlanAgentic(cfg Config) []Session {
	a := cfg.Agentic
	g := Rand(Mix(uint64(cfg.Seed), 0xa9e47))
	uniform := func() float64 { return float64(g.Next()>>11) / (1 << 53) }
	// jitter draws from 0.5× to 1.5× of mean, so gaps average to the mean.
	// Delays are drawn on the workload's clock, then scaled to the run's.
	scale := a.TimeScale
	if scale <= 0 {
		scale = DefaultTimeScale
	}
	jitter := func(mean time.Duration) time.Duration {
		return time.Duration(float64(mean) * (0.5 + uniform()) * scale)
	}
	waves := max(a.Waves, 1)
	perWave := (a.Sessions + waves - 1) / waves
	sessions := make([]Session, a.Sessions)
	for i := range sessions {
		s := &sessions[i]
		s.ID = fmt.Sprintf("s%04d-%x", i, Mix(uint64(cfg.Seed), uint64(i))&0xffffff)
		s.Tenant = i % max(a.Tenants, 1)
		// Sessions of one wave start within 100ms of each other: a burst.
		wave := i / perWave
		s.Start = time.Duration((float64(wave)*float64(a.WaveInterval) + uniform()*float64(100*time.Millisecond)) * scale)
		if a.Concurrency > 0 {
			s.Start = 0
		}
		seed := Mix(uint64(cfg.Seed), uint64(i))
		s.Turns = make([]Turn, a.TurnsPerSession)
		for t := range s.Turns {
			turn := &s.Turns[t]
			turn.MaxOutputTokens = a.OutputTokens
			switch {
			case t == 0:
				turn.Kind = TurnOpen
				turn.Input = []Item{
					{Kind: ItemMessage, Role: "system", Text: SystemPrompt(s.Tenant, a.SystemPromptTokens, a.ToolSchemaTokens)},
					{Kind: ItemMessage, Role: "user", Text: fmt.Sprintf("Task %s: ", s.ID) + words(Mix(domainUser, seed, 0), a.UserTurnTokens)},
				}
			case uniform() < a.HumanTurnShare:
				turn.Kind = TurnHuman
				turn.Delay = jitter(a.ThinkTime.D())
				turn.Input = []Item{{Kind: ItemMessage, Role: "user", Text: words(Mix(domainUser, seed, uint64(t)), a.UserTurnTokens)}}
			default:
				turn.Kind = TurnTool
				turn.Delay = jitter(a.LoopGap.D())
				turn.Input = toolResult(a.ToolResultFormat, seed, s.ID, t, a.ToolResultTokens)
			}
		}
	}
	return sessions
}

// toolResult is the input of one tool-loop turn.
func toolResult(format string, seed uint64, session string, turn, tokens int) []Item {
	name := toolNames[Mix(domainArgs, seed, uint64(turn))%uint64(len(toolNames))]
	args := fmt.Sprintf(`{"path":"src/%s.go"}`, words(Mix(domainArgs, seed, uint64(turn)), 2))
	output := words(Mix(domainTool, seed, uint64(turn)), tokens)
	if format == ToolResultMessage {
		return []Item{{Kind: ItemMessage, Role: "user", Text: fmt.Sprintf("Result of %s(%s):\n%s", name, args, output)}}
	}
	callID := fmt.Sprintf("call_%s_%d", session, turn)
	return []Item{
		{Kind: ItemFunctionCall, CallID: callID, Name: name, Text: args},
		{Kind: ItemFunctionCallOutput, CallID: callID, Text: output},
	}
}
