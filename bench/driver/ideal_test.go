package driver

import (
	"math"
	"os"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

func TestIdealTraceReuse(t *testing.T) {
	req := func(tokens int, ids ...int64) workload.TraceRequest {
		return workload.TraceRequest{InputTokens: tokens, HashIDs: ids}
	}
	for _, tc := range []struct {
		name     string
		capacity int
		reqs     []workload.TraceRequest
		cached   float64
	}{
		{"unbounded: the repeated prefix hits, cut to the prompt", 0,
			[]workload.TraceRequest{req(1000, 1, 2), req(1100, 1, 2, 3), req(300, 1)}, 1024 + 300},
		{"a miss ends the prefix", 0,
			[]workload.TraceRequest{req(1024, 1, 2), req(1536, 9, 2, 3)}, 0},
		{"one block of capacity keeps only the most recent", 512,
			[]workload.TraceRequest{req(1024, 1, 2), req(512, 1), req(512, 2)}, 0},
		{"LRU keeps what was touched", 1024,
			[]workload.TraceRequest{req(512, 1), req(512, 2), req(512, 1), req(512, 3), req(512, 1)}, 1024},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := IdealTraceReuse(tc.reqs, tc.capacity)
			if got.CachedTokens != tc.cached || got.Method != IdealGlobalLRU {
				t.Errorf("cached = %v (%s), want %v", got.CachedTokens, got.Method, tc.cached)
			}
		})
	}
}

// TestIdealTraceReuseMooncake checks the ideal against the figures in the
// trace's README, when the trace is present.
func TestIdealTraceReuseMooncake(t *testing.T) {
	path := "../" + workload.DefaultTracePath
	if _, err := os.Stat(path); err != nil {
		t.Skipf("trace not present: %v", err)
	}
	reqs, err := workload.LoadTrace(workload.TraceConfig{Path: path, TimeScale: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		capacity int
		want     float64
	}{{1 << 20, 0.056}, {4 << 20, 0.185}, {16 << 20, 0.341}, {0, 0.374}} {
		got := IdealTraceReuse(reqs, tc.capacity)
		got.HitRate = got.CachedTokens / got.PromptTokens
		if math.Abs(got.HitRate-tc.want) > 0.006 {
			t.Errorf("capacity %d: ideal %.3f, want %.3f", tc.capacity, got.HitRate, tc.want)
		}
	}
}

func TestIdealAgenticReuse(t *testing.T) {
	cfg := workload.Config{Agentic: workload.AgenticConfig{SystemPromptTokens: 100, ToolSchemaTokens: 0}}
	sys := systemPromptTokens("t0", 100, 0)
	if sys < 100 || sys > 110 {
		t.Fatalf("system prompt of t0 = %d tokens, want about 100", sys)
	}
	ms := time.Millisecond
	samples := []*Sample{
		// Two sessions of tenant t0 opening; the second finds the system
		// prompt the first sent.
		{Tenant: "t0", Session: "a", Start: 0, InputTokens: 150, OutputTokens: 20},
		{Tenant: "t0", Session: "b", Start: 1 * ms, InputTokens: 160, OutputTokens: 20},
		// a's second turn repeats its first prompt and answer.
		{Tenant: "t0", Session: "a", Start: 2 * ms, InputTokens: 300, OutputTokens: 20},
		// b's second turn failed; its third builds on its first.
		{Tenant: "t0", Session: "b", Start: 3 * ms, Error: "http_503"},
		{Tenant: "t0", Session: "b", Start: 4 * ms, InputTokens: 400, OutputTokens: 20},
		// A turn cannot hit its own last token.
		{Tenant: "t0", Session: "a", Start: 5 * ms, InputTokens: 321, OutputTokens: 20},
	}
	got := IdealAgenticReuse(cfg, samples, 16)
	want := float64(0 + sys/16*16 + 160 + 176 + 320)
	if got.CachedTokens != want || got.PromptTokens != 150+160+300+400+321 {
		t.Errorf("cached/prompt = %v/%v, want %v/%v", got.CachedTokens, got.PromptTokens, want, 150+160+300+400+321)
	}
}

// TestIdealAgenticReuseCounted: with the engines' own count of the
// system prompt (a real tokenizer), a session's first turn is credited
// that many tokens of it, not 4 bytes a token.
func TestIdealAgenticReuseCounted(t *testing.T) {
	cfg := workload.Config{Agentic: workload.AgenticConfig{SystemPromptTokens: 100, ToolSchemaTokens: 0}}
	var asked []string
	count := func(system string) int { asked = append(asked, system); return 170 }
	samples := []*Sample{
		{Tenant: "t0", Session: "a", Start: 0, InputTokens: 250, OutputTokens: 20},
		{Tenant: "t0", Session: "b", Start: 1, InputTokens: 260, OutputTokens: 20},
		{Tenant: "t0", Session: "c", Start: 2, InputTokens: 150, OutputTokens: 20},
	}
	got := idealAgenticReuse(cfg, samples, 16, count)
	// b: 170 tokens of system prompt, in whole blocks; c: capped by its
	// own prompt less the last token.
	if want := float64(160 + 144); got.CachedTokens != want {
		t.Errorf("cached = %v, want %v", got.CachedTokens, want)
	}
	if len(asked) != 1 || asked[0] != workload.SystemPrompt(0, 100, 0) {
		t.Errorf("counted %d system prompts (%q), want t0's once", len(asked), asked)
	}
}

func TestSetIdeal(t *testing.T) {
	r := &Result{Engines: &scrape.EngineCache{Flavor: "vllm", HitRate: 0.45}}
	r.setIdeal(IdealReuse{PromptTokens: 100, CachedTokens: 50})
	if r.Ideal.HitRate != 0.5 || math.Abs(r.Ideal.CapturedShare-0.9) > 1e-9 {
		t.Errorf("ideal = %+v, want hit rate 0.5, captured 0.9", r.Ideal)
	}
}
