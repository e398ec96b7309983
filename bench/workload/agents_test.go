package workload

import (
	"reflect"
	"testing"
	"time"
)

// agentsStats are the published figures of agentic traces, measured on
// planned sessions: tokens are text bytes over BytesPerToken, a call's
// input its whole prompt (for a continuing call, the previous prompt, its
// answer at max_output_tokens and the new items).
type agentsStats struct {
	sessions, calls                int
	inputMean, outputMean          float64
	sharingShare, sharedMean       float64
	toolShare, sideShare, compacts float64
	maxGap                         time.Duration
}

func planStats(cfg Config, sessions int) agentsStats {
	var st agentsStats
	var input, output, shared float64
	var sharing, tools, sides, compacts, mains int
	itemTokens := func(items []Item) int {
		n := 0
		for _, it := range items {
			n += len(it.Text) / BytesPerToken
		}
		return n
	}
	for i := range sessions {
		s := AgentSession(cfg, i, 0, 1)
		st.sessions++
		prompt := 0 // the main conversation's last prompt and answer
		for _, t := range s.Turns {
			st.calls++
			st.maxGap = max(st.maxGap, t.Delay)
			in := itemTokens(t.Input)
			switch {
			case t.Kind == TurnSide:
				sides++
			case t.Kind.Continues():
				sharing++
				shared += float64(prompt)
				in += prompt
				prompt = in + t.MaxOutputTokens
			default:
				prompt = in + t.MaxOutputTokens
			}
			switch t.Kind {
			case TurnTool:
				tools++
			case TurnCompact:
				compacts++
			}
			if t.Kind != TurnSide && t.Kind != TurnCompact {
				mains++
				output += float64(t.MaxOutputTokens)
			}
			input += float64(in)
		}
	}
	st.inputMean = input / float64(st.calls)
	st.outputMean = output / float64(mains)
	st.sharingShare = float64(sharing) / float64(st.calls)
	st.sharedMean = shared / float64(sharing)
	st.toolShare = float64(tools) / float64(st.calls)
	st.sideShare = float64(sides) / float64(st.calls)
	st.compacts = float64(compacts) / float64(st.sessions)
	return st
}

// TestAgentsDistributions: sessions drawn with the defaults have the
// shape of the published agentic traces (22 calls a session, 49.1k input
// tokens and 659 output tokens a call, 92% of calls sharing a prefix with
// an earlier one, 44.6k tokens of it on average, 61.7% following a tool
// result, gaps capped at 15 s), within what 2,000 sessions of a seed
// give; and a seed gives the same sessions every time.
func TestAgentsDistributions(t *testing.T) {
	var cfg Config
	cfg.Workload = WorkloadAgents
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	st := planStats(cfg, 2000)
	t.Logf("%d sessions: %.1f calls each; input %.0f tokens a call, output %.0f; %.1f%% sharing a prefix (%.0f tokens on average), %.1f%% after a tool result, %.1f%% side calls; %.2f compactions a session; longest gap %v",
		st.sessions, float64(st.calls)/float64(st.sessions), st.inputMean, st.outputMean, 100*st.sharingShare, st.sharedMean, 100*st.toolShare, 100*st.sideShare, st.compacts, st.maxGap)
	for _, c := range []struct {
		name          string
		got, min, max float64
	}{
		{"calls a session", float64(st.calls) / float64(st.sessions), 19, 25},
		{"input tokens a call", st.inputMean, 42000, 56000},
		{"output tokens a call", st.outputMean, 600, 720},
		{"share of calls sharing a prefix", st.sharingShare, 0.89, 0.95},
		{"shared prefix tokens", st.sharedMean, 40000, 54000},
		{"share after a tool result", st.toolShare, 0.56, 0.66},
		{"share of side calls", st.sideShare, 0.02, 0.06},
		{"compactions a session", st.compacts, 0.05, 1},
	} {
		if c.got < c.min || c.got > c.max {
			t.Errorf("%s: %.3f, want %.3f to %.3f", c.name, c.got, c.min, c.max)
		}
	}
	if st.maxGap > DefaultAgentsGapCap || st.maxGap < DefaultAgentsGapCap/2 {
		t.Errorf("longest gap %v: want up to the %v cap, and near it", st.maxGap, DefaultAgentsGapCap)
	}
	if !reflect.DeepEqual(AgentSession(cfg, 7, 3, 1), AgentSession(cfg, 7, 3, 1)) {
		t.Error("a session is not a pure function of the seed, agent and number")
	}
	if reflect.DeepEqual(AgentSession(cfg, 7, 3, 1).Turns, AgentSession(cfg, 7, 4, 1).Turns) {
		t.Error("an agent's sessions repeat")
	}
}

// TestAgentArrival: each phase's new agents arrive over its ramp, after
// the phase before's.
func TestAgentArrival(t *testing.T) {
	a := AgentsConfig{Phases: []int{2, 6}, PhaseDuration: Duration(100 * time.Second), Ramp: 0.5}
	want := []time.Duration{0, 25 * time.Second, 100 * time.Second, 112500 * time.Millisecond, 125 * time.Second, 137500 * time.Millisecond, -1}
	for i, w := range want {
		if got := a.AgentArrival(i, 1); got != w {
			t.Errorf("agent %d arrives at %v, want %v", i, got, w)
		}
	}
	if got := a.AgentArrival(3, 0.1); got != 11250*time.Millisecond {
		t.Errorf("agent 3 at a tenth of the time: %v, want 11.25s", got)
	}
}
