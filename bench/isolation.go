package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
)

// Tenant labels of the isolation scenario.
const (
	TenantA = "A"
	TenantB = "B"
)

// isolationPromptTenant gives tenant A a system prompt of its own, apart
// from the agentic tenants' (B's loops use agentic tenant 0's).
const isolationPromptTenant = 1000

// IsolationReport is the isolation scenario's verdict: tenant A's
// interactive latency without and with tenant B's burst, and what the
// gateway shed. A's figures cover the same window in both runs: from the
// burst's start to the end.
type IsolationReport struct {
	WindowStartSeconds float64 `json:"window_start_seconds"`
	// BLoops is how many agent loops B kept in flight during the burst.
	BLoops int `json:"b_loops"`
	// BaselineA and BurstA are A's requests in the window of each run;
	// BurstB is B's requests.
	BaselineA Summary `json:"baseline_a"`
	BurstA    Summary `json:"burst_a"`
	BurstB    Summary `json:"burst_b"`
	// P99TTFT of A in the window, and burst/baseline (0 when undefined).
	BaselineAP99TTFTMs float64 `json:"baseline_a_p99_ttft_ms"`
	BurstAP99TTFTMs    float64 `json:"burst_a_p99_ttft_ms"`
	P99TTFTRatio       float64 `json:"p99_ttft_ratio"`
	// Sheds counts the burst run's shed requests by band, then reason.
	Sheds map[string]map[string]int `json:"sheds,omitempty"`
	// Baseline is the whole baseline run.
	Baseline *Result `json:"baseline"`
}

// runIsolation runs the scenario twice, without and with B's burst, and
// returns the burst run with the report attached.
func runIsolation(ctx context.Context, cfg Config, target Target, label string) (*Result, error) {
	ic := cfg.Isolation
	dur := ic.Duration.D()
	burstAt := time.Duration(float64(dur) * ic.BurstStart)
	loops := int(math.Ceil(ic.BurstMultiple * float64(ic.FleetSlots)))
	phase := cfg
	phase.MaxDuration = ic.Duration
	keyA, keyB := orKey(ic.KeyA, target.APIKey), orKey(ic.KeyB, target.APIKey)
	nA := int(math.Ceil(dur.Seconds() * ic.ARate))

	baseline, baseSamples := measure(ctx, phase, target, label+" baseline", nA, func(ctx context.Context, r *runner) {
		r.interactive(ctx, keyA)
	})
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: isolation baseline: %w", err)
	}
	burst, burstSamples := measure(ctx, phase, target, label+" burst", 0, func(ctx context.Context, r *runner) {
		var wg sync.WaitGroup
		wg.Go(func() { r.interactive(ctx, keyA) })
		for i := range loops {
			wg.Go(func() { r.agentLoop(ctx, i, burstAt, keyB, ic.BPriority) })
		}
		wg.Wait()
	})

	inWindow := func(samples []*Sample, tenant string) []*Sample {
		var out []*Sample
		for _, s := range samples {
			if s.Tenant == tenant && s.Start >= burstAt {
				out = append(out, s)
			}
		}
		return out
	}
	window := func(res *Result) time.Duration {
		return max(time.Duration(res.DurationSeconds*float64(time.Second))-burstAt, time.Millisecond)
	}
	rep := &IsolationReport{
		WindowStartSeconds: burstAt.Seconds(),
		BLoops:             loops,
		BaselineA:          aggregate(inWindow(baseSamples, TenantA), window(baseline)),
		BurstA:             aggregate(inWindow(burstSamples, TenantA), window(burst)),
		BurstB:             aggregate(inWindow(burstSamples, TenantB), window(burst)),
		Sheds:              burst.Total.Sheds,
		Baseline:           baseline,
	}
	rep.BaselineAP99TTFTMs = rep.BaselineA.TTFT.P99Ms
	rep.BurstAP99TTFTMs = rep.BurstA.TTFT.P99Ms
	if rep.BaselineAP99TTFTMs > 0 {
		rep.P99TTFTRatio = rep.BurstAP99TTFTMs / rep.BaselineAP99TTFTMs
	}
	burst.Isolation = rep
	return burst, nil
}

func orKey(k, fallback string) string {
	if k != "" {
		return k
	}
	return fallback
}

// interactive sends tenant A's turns, open loop at ARate until the run
// stops: each a fresh conversation with A's system prompt and a question.
func (r *runner) interactive(ctx context.Context, key string) {
	ic, a := r.cfg.Isolation, r.cfg.Agentic
	interval := time.Duration(float64(time.Second) / ic.ARate)
	system := SystemPrompt(isolationPromptTenant, a.SystemPromptTokens, a.ToolSchemaTokens)
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		if !sleepUntil(ctx, r.start.Add(time.Duration(i)*interval)) || r.stopped(ctx) {
			break
		}
		wg.Go(func() {
			c := call{
				api:      r.cfg.API,
				key:      key,
				priority: BandInteractive,
				input: []Item{
					{Kind: ItemMessage, Role: "system", Text: system},
					{Kind: ItemMessage, Role: "user", Text: words(mix(domainUser, uint64(r.cfg.Seed), 0xa, uint64(i)), a.UserTurnTokens)},
				},
				maxTokens: a.OutputTokens,
			}
			r.do(ctx, c, labels{tenant: TenantA, turn: i, kind: TurnSingle})
		})
	}
	wg.Wait()
}

// agentLoop is one of tenant B's loops: from burstAt on, agent sessions
// back to back with no think time, until the run stops.
func (r *runner) agentLoop(ctx context.Context, loop int, burstAt time.Duration, key, priority string) {
	for round := 0; !r.stopped(ctx); round++ {
		c := r.cfg
		c.Seed = int64(mix(uint64(r.cfg.Seed), 0xb, uint64(loop), uint64(round)) >> 1)
		c.Agentic.Sessions, c.Agentic.Waves, c.Agentic.Tenants = 1, 1, 1
		c.Agentic.HumanTurnShare = -1
		s := PlanAgentic(c)[0]
		s.Start += burstAt
		if round > 0 {
			s.Start = 0
		}
		r.session(ctx, s, TenantB, key, priority)
	}
}
