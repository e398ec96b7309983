package agents

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// TestPhases: turns fall in the phase they were sent in; failures are
// counted by status, turns cut at the run's end apart; the ideal reuse follows each conversation (a side
// call's only the system prompt, a resume's the system prompt again) and
// the floor is what the ideal leaves to prefill.
func TestPhases(t *testing.T) {
	var cfg workload.Config
	cfg.Workload = workload.WorkloadAgents
	cfg.Agents.Phases = []int{1, 2}
	cfg.Agents.PhaseDuration = workload.Duration(10 * time.Second)
	cfg.Agents.SystemTokens, cfg.Agents.ToolSchemaTokens = 100, 0
	cfg.EnsureDefaults()
	system := driver.Target{SystemTokens: func(string) int { return 160 }}
	at := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	smp := func(start float64, session string, kind workload.TurnKind, in, out, cached int) *driver.Sample {
		return &driver.Sample{Tenant: "t0", Session: session, Kind: kind, Start: at(start), InputTokens: in, OutputTokens: out, CachedTokens: cached, TTFT: 10 * time.Millisecond}
	}
	fail := func(start float64, status int) *driver.Sample {
		return &driver.Sample{Tenant: "t0", Session: "x", Kind: workload.TurnTool, Start: at(start), Status: status, Error: "http_x"}
	}
	samples := []*driver.Sample{
		smp(0, "a", workload.TurnOpen, 200, 40, 0),      // nothing before it: ideal 0
		smp(1, "a", workload.TurnTool, 500, 40, 240),    // the open call's 240: ideal 240
		smp(2, "a", workload.TurnSide, 300, 10, 160),    // the system prompt: 160
		smp(3, "a", workload.TurnCompact, 900, 40, 528), // the tool call's 540, in blocks: 528
		smp(12, "a", workload.TurnResume, 400, 40, 160), // the system prompt: 160
		smp(13, "b", workload.TurnOpen, 170, 40, 160),   // the system prompt, less the last token: 160
		fail(14, 408), fail(15, 429), fail(16, 503), fail(17, 0),
		{Tenant: "t0", Session: "c", Kind: workload.TurnTool, Start: at(18), Error: driver.ErrClassCanceled}, // cut at the end
	}
	rep := &Report{Phases: make([]Phase, 2), PrefillTokensPerSecond: 1000}
	rep.Phases[0].CPU = CPUSplit{Gateway: 2}
	fillPhases(rep, cfg, system, samples, 10*time.Second, 0.5)
	p1, p2 := rep.Phases[0], rep.Phases[1]
	// 2 s of CPU over 4 turns; a phase of 10 s of wall time is 20 s of
	// the fleet's (at half real time): a tenth of a core.
	if p1.GatewayCPUPerTurnMs != 500 || p1.GatewayCores != 0.1 {
		t.Errorf("phase 1: %.1f ms a turn, %.3f cores; want 500 and 0.1 (on the fleet's clock)", p1.GatewayCPUPerTurnMs, p1.GatewayCores)
	}
	if p1.Turns != 4 || p1.Answered != 4 || p1.Errors != 0 {
		t.Errorf("phase 1: %d turns, %d answered, %d errors; want 4, 4, 0", p1.Turns, p1.Answered, p1.Errors)
	}
	if p2.Turns != 6 || p2.Cut != 1 || p2.Answered != 2 || p2.Err408 != 1 || p2.Err429 != 1 || p2.Err503 != 1 || p2.ErrOther != 1 {
		t.Errorf("phase 2: %+v", p2)
	}
	if want := int64(0 + 240 + 160 + 528); p1.IdealTokens != want {
		t.Errorf("phase 1 ideal %d tokens, want %d", p1.IdealTokens, want)
	}
	if p1.Captured != 1 || p2.IdealTokens != 320 || p2.Captured != 1 {
		t.Errorf("captured %.2f and %.2f of ideals %d and %d, want all of 928 and 320", p1.Captured, p2.Captured, p1.IdealTokens, p2.IdealTokens)
	}
	// Phase 2's uncached tokens: 240 and 10; at 1000 a second, half time.
	if p2.FloorP50Ms != (120+5)/2.0 || p2.FloorP90Ms <= p2.FloorP50Ms {
		t.Errorf("phase 2 floor p50 %.1f ms, p90 %.1f, want 62.5 and more", p2.FloorP50Ms, p2.FloorP90Ms)
	}
	if p2.OverFloor != 10/p2.FloorP50Ms {
		t.Errorf("phase 2 TTFT over floor %.3f, want %.3f", p2.OverFloor, 10/p2.FloorP50Ms)
	}
}

// TestCPUSplit: a CPU profile's samples of goroutines started under the
// bench's label are the client's, the rest the gateway's; the profile is
// kept, as the phase's, where asked, and the heap's beside it.
func TestCPUSplit(t *testing.T) {
	prof := startCPUProfile()
	if !prof.on {
		t.Skipf("no CPU profile: %v", prof.err)
	}
	dir := t.TempDir()
	prof.save = profileSaver(dir, "cache-aware")
	burn := func(d time.Duration) {
		b := make([]byte, 1<<10)
		for end := time.Now().Add(d); time.Now().Before(end); {
			s := sha256.Sum256(b)
			b[0] = s[0]
		}
	}
	asClient(context.Background(), func(context.Context) {
		done := make(chan struct{})
		go func() { burn(300 * time.Millisecond); close(done) }()
		<-done
	})
	burn(300 * time.Millisecond)
	split, err := prof.cut(1, true)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(filepath.Join(dir, "phase-2-cache-aware.pprof"))
	if err != nil {
		t.Fatalf("phase 2's profile not kept: %v", err)
	}
	if again, err := splitProfile(kept); err != nil || again != split {
		t.Errorf("kept profile splits as %+v (%v), want %+v", again, err, split)
	}
	if heap, err := os.ReadFile(filepath.Join(dir, "phase-2-cache-aware.heap.pprof")); err != nil || len(heap) == 0 {
		t.Errorf("phase 2's heap profile not kept: %v", err)
	}
	if split.Client < 0.05 || split.Gateway < 0.05 || split.Engines != 0 {
		t.Errorf("split %+v: want about 0.3 s each of client and gateway, none of engines", split)
	}
}

// FuzzParseProfile: any bytes parse or fail, never panic.
func FuzzParseProfile(f *testing.F) {
	f.Add([]byte{0x32, 0x04, 0x0a, 0x02, 0x01, 0x02})
	f.Add([]byte{0x22, 0x06, 0x08, 0x01, 0x22, 0x02, 0x08, 0x01, 0x2a, 0x04, 0x08, 0x01, 0x10, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parseProfile(b)
		if err == nil {
			for _, s := range p.samples {
				p.labelled(s, labelKey, labelClient)
				p.inFunction(s, func(string) bool { return false })
			}
		}
	})
}
