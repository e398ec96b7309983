package workload

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPlanAgenticDeterministic(t *testing.T) {
	cfg := Config{Seed: 7}
	cfg.EnsureDefaults()
	a, b := PlanAgentic(cfg), PlanAgentic(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different plans")
	}
	cfg.Seed = 8
	if c := PlanAgentic(cfg); reflect.DeepEqual(a, c) {
		t.Fatal("different seeds gave the same plan")
	}
	ac := cfg.Agentic
	if len(a) != ac.Sessions {
		t.Fatalf("sessions = %d", len(a))
	}
	var human, tool int
	for i, s := range a {
		if s.Tenant != i%ac.Tenants || len(s.Turns) != ac.TurnsPerSession {
			t.Fatalf("session %d: tenant %d, %d turns", i, s.Tenant, len(s.Turns))
		}
		// Sessions start in waves, each a burst within 100ms.
		wave := time.Duration(i/(ac.Sessions/ac.Waves)) * ac.WaveInterval.D()
		if s.Start < wave || s.Start >= wave+100*time.Millisecond {
			t.Errorf("session %d starts at %v, want in its wave at %v", i, s.Start, wave)
		}
		open := s.Turns[0]
		if open.Kind != TurnOpen || open.Input[0].Role != "system" || open.Input[0].Text != SystemPrompt(s.Tenant, ac.SystemPromptTokens, ac.ToolSchemaTokens) {
			t.Fatalf("session %d does not open with its tenant's system prompt", i)
		}
		for _, turn := range s.Turns[1:] {
			if turn.MaxOutputTokens != ac.OutputTokens {
				t.Errorf("max output tokens %d", turn.MaxOutputTokens)
			}
			switch turn.Kind {
			case TurnHuman:
				human++
				if turn.Delay < ac.ThinkTime.D()/2 || turn.Delay > ac.ThinkTime.D()*3/2 {
					t.Errorf("think time %v", turn.Delay)
				}
			case TurnTool:
				tool++
				if turn.Delay < ac.LoopGap.D()/2 || turn.Delay > ac.LoopGap.D()*3/2 {
					t.Errorf("loop gap %v", turn.Delay)
				}
				if len(turn.Input) != 2 || turn.Input[0].Kind != ItemFunctionCall || turn.Input[1].Kind != ItemFunctionCallOutput ||
					turn.Input[0].CallID != turn.Input[1].CallID {
					t.Fatalf("tool turn input %+v", turn.Input)
				}
				if got := len(turn.Input[1].Text); got != ac.ToolResultTokens*BytesPerToken-1 {
					t.Errorf("tool result is %d bytes, want %d", got, ac.ToolResultTokens*BytesPerToken-1)
				}
			default:
				t.Errorf("turn kind %q after the first", turn.Kind)
			}
		}
	}
	share := float64(human) / float64(human+tool)
	if math.Abs(share-ac.HumanTurnShare) > 0.1 {
		t.Errorf("human turn share %.2f, want about %.2f", share, ac.HumanTurnShare)
	}
	// Sessions differ from each other.
	if a[0].Turns[1].Input[len(a[0].Turns[1].Input)-1].Text == a[2].Turns[1].Input[len(a[2].Turns[1].Input)-1].Text {
		t.Error("two sessions sent the same text")
	}
}

func TestPlanAgenticMessageFormat(t *testing.T) {
	cfg := Config{Agentic: AgenticConfig{ToolResultFormat: ToolResultMessage, HumanTurnShare: -1}}
	cfg.EnsureDefaults()
	for _, s := range PlanAgentic(cfg) {
		for _, turn := range s.Turns[1:] {
			if turn.Kind != TurnTool || len(turn.Input) != 1 || turn.Input[0].Kind != ItemMessage || turn.Input[0].Role != "user" {
				t.Fatalf("turn %+v", turn)
			}
		}
	}
}

func TestSystemPrompt(t *testing.T) {
	p := SystemPrompt(3, 1000, 500)
	if p != SystemPrompt(3, 1000, 500) || p == SystemPrompt(4, 1000, 500) {
		t.Fatal("system prompt is not a function of its tenant")
	}
	tokens := len(p) / BytesPerToken
	if tokens < 1500 || tokens > 1520 {
		t.Errorf("system prompt is about %d tokens, want about 1500", tokens)
	}
	if !strings.Contains(p, "# Tools\n") {
		t.Error("no tool schema")
	}
}

func TestBlockText(t *testing.T) {
	a := BlockText(46)
	if a != BlockText(46) {
		t.Fatal("same id gave different text")
	}
	if a == BlockText(47) {
		t.Fatal("different ids gave the same text")
	}
	if len(a) != BlockTokens*BytesPerToken {
		t.Errorf("block is %d bytes, want %d", len(a), BlockTokens*BytesPerToken)
	}
	if n := len(strings.Fields(a)); n != BlockTokens {
		t.Errorf("block has %d words, want %d", n, BlockTokens)
	}
	for _, w := range strings.Fields(a) {
		if len(w) != 3 {
			t.Fatalf("word %q", w)
		}
	}
}

func TestTracePrompt(t *testing.T) {
	tests := []struct {
		name  string
		ids   []int64
		input int
	}{
		{"one partial block", []int64{5}, 100},
		{"exact blocks", []int64{5, 6}, 1024},
		{"cut in the last block", []int64{5, 6, 7}, 1500},
		{"fewer ids than the length needs", []int64{5}, 700},
		{"no ids", nil, 10},
		{"empty", []int64{5}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := TracePrompt(tc.ids, tc.input)
			if tc.input == 0 {
				if p != "" {
					t.Fatalf("prompt %q", p)
				}
				return
			}
			if len(p) != tc.input*BytesPerToken-1 || len(strings.Fields(p)) != tc.input {
				t.Errorf("prompt is %d bytes, %d words; want %d words", len(p), len(strings.Fields(p)), tc.input)
			}
			// Blocks of the same ids are the same prefix.
			for i, id := range tc.ids {
				if (i+1)*BlockTokens > tc.input {
					want := BlockText(id)[:tc.input*BytesPerToken-i*BlockTokens*BytesPerToken-1]
					if got := p[i*BlockTokens*BytesPerToken:]; got != want {
						t.Errorf("partial block %d differs from BlockText(%d)", i, id)
					}
					break
				}
				if got := p[i*BlockTokens*BytesPerToken:][:BlockTokens*BytesPerToken-1]; got != BlockText(id)[:BlockTokens*BytesPerToken-1] {
					t.Errorf("block %d differs from BlockText(%d)", i, id)
				}
			}
		})
	}
	// Two requests sharing their first hash id share their first 512 tokens.
	a, b := TracePrompt([]int64{1, 2}, 1000), TracePrompt([]int64{1, 3}, 1000)
	n := BlockTokens * BytesPerToken
	if a[:n] != b[:n] || a[n:] == b[n:] {
		t.Error("shared first block is not a shared prefix")
	}
}

func TestParseTraceLine(t *testing.T) {
	tests := []struct {
		name string
		line string
		want TraceRecord
		err  bool
	}{
		{"mooncake", `{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2354]}`,
			TraceRecord{Timestamp: 27482, InputLength: 6955, OutputLength: 52, HashIDs: []int64{46, 47, 2354}}, false},
		{"unknown fields ignored", `{"timestamp":1,"input_length":2,"output_length":3,"hash_ids":[],"x":1}`,
			TraceRecord{Timestamp: 1, InputLength: 2, OutputLength: 3, HashIDs: []int64{}}, false},
		{"negative timestamp", `{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}`, TraceRecord{}, true},
		{"negative length", `{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": [1]}`, TraceRecord{}, true},
		{"huge length", `{"timestamp": 1, "input_length": 99999999999, "output_length": 1, "hash_ids": [1]}`, TraceRecord{}, true},
		{"string id", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": ["a"]}`, TraceRecord{}, true},
		{"trailing data", `{"timestamp": 1} {"timestamp": 2}`, TraceRecord{}, true},
		{"not json", `timestamp=1`, TraceRecord{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTraceLine([]byte(tc.line))
			if tc.err {
				if !errors.Is(err, ErrTraceLine) {
					t.Fatalf("err = %v, want ErrTraceLine", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestPlanTrace(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}
{"timestamp": 1000, "input_length": 20, "output_length": 50, "hash_ids": [1]}

{"timestamp": 2000, "input_length": 30, "output_length": 0, "hash_ids": [2]}
{"timestamp": 3000, "input_length": 40, "output_length": 5, "hash_ids": [3]}
`
	tests := []struct {
		name   string
		tc     TraceConfig
		inputs []int
		ats    []time.Duration
	}{
		{"all", TraceConfig{TimeScale: 1}, []int{10, 20, 30, 40}, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}},
		{"limit", TraceConfig{TimeScale: 1, Limit: 2}, []int{10, 20}, []time.Duration{0, time.Second}},
		{"window rebased and scaled", TraceConfig{TimeScale: 0.5, WindowStart: Duration(time.Second), WindowEnd: Duration(3 * time.Second)},
			[]int{20, 30}, []time.Duration{0, 500 * time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs, err := PlanTrace(strings.NewReader(trace), tc.tc)
			if err != nil {
				t.Fatal(err)
			}
			var inputs []int
			var ats []time.Duration
			for _, r := range reqs {
				inputs = append(inputs, r.InputTokens)
				ats = append(ats, r.At)
				if r.MaxOutputTokens < 1 {
					t.Errorf("max output tokens %d", r.MaxOutputTokens)
				}
			}
			if !reflect.DeepEqual(inputs, tc.inputs) || !reflect.DeepEqual(ats, tc.ats) {
				t.Errorf("inputs %v at %v; want %v at %v", inputs, ats, tc.inputs, tc.ats)
			}
		})
	}
	reqs, _ := PlanTrace(strings.NewReader(trace), TraceConfig{MaxOutputTokens: 8})
	if reqs[1].MaxOutputTokens != 8 {
		t.Errorf("max output cap: %d", reqs[1].MaxOutputTokens)
	}
	_, err := PlanTrace(strings.NewReader(trace+"{bad\n"), TraceConfig{})
	if !errors.Is(err, ErrTraceLine) || !strings.Contains(err.Error(), "line 6") {
		t.Errorf("bad line: err = %v", err)
	}
}

// TestMooncakeTrace reads the real trace, when present, and checks it
// against its README's figures.
func TestMooncakeTrace(t *testing.T) {
	path := "../" + DefaultTracePath
	if _, err := os.Stat(path); err != nil {
		t.Skipf("trace not present: %v", err)
	}
	reqs, err := LoadTrace(TraceConfig{Path: path, TimeScale: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 12031 {
		t.Errorf("requests = %d, want 12031", len(reqs))
	}
	for i, r := range reqs {
		if len(r.HashIDs) != (r.InputTokens+BlockTokens-1)/BlockTokens {
			t.Fatalf("request %d: %d hash ids for %d tokens", i, len(r.HashIDs), r.InputTokens)
		}
	}
	first := reqs[0]
	if p := first.Prompt(); len(strings.Fields(p)) != first.InputTokens {
		t.Errorf("first prompt has %d words, want %d", len(strings.Fields(p)), first.InputTokens)
	}
}

func TestConfig(t *testing.T) {
	var cfg Config
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	bad := cfg
	bad.Workload, bad.Priority = "storm", "urgent"
	bad.Agentic.Sessions = 0
	bad.Trace.TimeScale = -1
	bad.Isolation.Settle = 1
	bad.Chaos.Downtime = bad.Chaos.KillInterval
	bad.Chaos.AtOnce = 0
	err := bad.Validate()
	for _, want := range []string{"workload", "priority", "agentic.sessions", "trace.time_scale", "isolation.settle", "chaos.downtime", "chaos.at_once"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want it to name %s", err, want)
		}
	}

	// Durations read and write as text, in JSON and in YAML-style text.
	in := []byte(`{"agentic":{"think_time":"1.5s","loop_gap":"250ms"},"trace":{"window_end":"2"}}`)
	var c Config
	if err := json.Unmarshal(in, &c); err != nil {
		t.Fatal(err)
	}
	if c.Agentic.ThinkTime.D() != 1500*time.Millisecond || c.Agentic.LoopGap.D() != 250*time.Millisecond || c.Trace.WindowEnd.D() != 2*time.Second {
		t.Errorf("decoded %v %v %v", c.Agentic.ThinkTime, c.Agentic.LoopGap, c.Trace.WindowEnd)
	}
	out, _ := json.Marshal(c)
	if !bytes.Contains(out, []byte(`"think_time":"1.5s"`)) {
		t.Errorf("encoded %s", out)
	}
	if err := json.Unmarshal([]byte(`{"request_timeout":"soon"}`), &c); err == nil {
		t.Error("bad duration accepted")
	}
	// Keys never leave the process in results.
	c.TenantKeys = []string{"sk-secret"}
	c.Isolation.KeyA = "sk-a"
	out, _ = json.Marshal(c)
	if bytes.Contains(out, []byte("sk-")) {
		t.Errorf("keys in JSON: %s", out)
	}
}
