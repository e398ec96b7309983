package overload

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Band is one band's outcome in the overload scenario.
type Band struct {
	// Offered is the arrivals sent; Completed ended with a whole answer.
	Offered   int `json:"offered"`
	Completed int `json:"completed"`
	// Shed were refused by the gateway (429/503 with a reason, or 408 for
	// a turn that waited its band's TTL); ShedWithRetryAfter of them
	// carried a Retry-After header. Reasons counts them by
	// x-turnpike-dropped-reason.
	Shed               int            `json:"shed"`
	ShedWithRetryAfter int            `json:"shed_with_retry_after"`
	Reasons            map[string]int `json:"reasons,omitempty"`
	// Errors failed otherwise (timeouts, engine errors).
	Errors int `json:"errors"`
	// TTFT of the completed requests.
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
}

// Report is the overload scenario's verdict, per band.
type Report struct {
	// OfferedPerSecond is the arrivals per wall second while they came,
	// all bands.
	OfferedPerSecond float64          `json:"offered_per_second"`
	Bands            map[string]*Band `json:"bands"`
	// IdleWhileQueuedSeconds is the run's occupancy count (see Occupancy):
	// seconds the gateway queued turns while an engine had room. Room kept
	// for interactive turns counts as room there, so held lower-band turns
	// beside an idle reserve show up in it.
	IdleWhileQueuedSeconds int     `json:"idle_while_queued_seconds"`
	MaxGatewayQueued       float64 `json:"max_gateway_queued"`
	// BaselineInteractiveP50Ms and P99Ms are the interactive arrivals'
	// TTFT sent alone, before the overload run, on the same fleet; and
	// InteractiveP99Ratio the overload run's p99 over the baseline's.
	BaselineInteractiveP50Ms float64 `json:"baseline_interactive_p50_ms"`
	BaselineInteractiveP99Ms float64 `json:"baseline_interactive_p99_ms"`
	InteractiveP99Ratio      float64 `json:"interactive_p99_ratio"`
}

// shed: the gateway refused s, at admission or from its queue (a
// 408 for a TTL spent waiting counts, unlike in Sample.Shed).
func shed(s *driver.Sample) bool {
	return s.Shed || (s.DroppedReason != "" && s.Status >= 400)
}

// arrival is one planned request.
type arrival struct {
	at   time.Duration
	band string
	req  workload.TraceRequest
}

// planArrivals plans the scenario's arrivals: each band a Poisson process
// at its rate, merged in time order, each prompt of blocks no other has
// (block ids from idBase on).
func planArrivals(cfg workload.Config, idBase int64) []arrival {
	oc := cfg.Overload
	end := oc.Duration.D()
	blocks := (oc.PromptTokens + workload.BlockTokens - 1) / workload.BlockTokens
	var out []arrival
	for bi, b := range []struct {
		name string
		rate float64
	}{{workload.BandInteractive, oc.InteractiveRate}, {workload.BandStandard, oc.StandardRate}, {workload.BandBackground, oc.BackgroundRate}} {
		if b.rate <= 0 {
			continue
		}
		g := workload.Rand(workload.Mix(uint64(cfg.Seed), 0x0e1, uint64(bi)))
		var at float64
		for {
			u := float64(g.Next()>>11) / (1 << 53)
			at += -math.Log(1-u) / b.rate
			wall := time.Duration(at * oc.TimeScale * float64(time.Second))
			if wall >= end {
				break
			}
			out = append(out, arrival{at: wall, band: b.name})
		}
	}
	slices.SortStableFunc(out, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	for i := range out {
		ids := make([]int64, blocks)
		for j := range ids {
			ids[j] = int64(i*blocks+j) + idBase
		}
		out[i].req = workload.TraceRequest{At: out[i].at, InputTokens: oc.PromptTokens, MaxOutputTokens: oc.OutputTokens, HashIDs: ids}
	}
	return out
}

// Block id bases of the overload plans: apart from the trace's and
// long-prompt's ids and from each other, so the baseline warms no cache
// the overload run then hits.
const (
	overloadIDs         = 2 << 40
	overloadBaselineIDs = 3 << 40
)

// Run sends interactive arrivals alone (the baseline), then every
// band's, open loop, and reports each band of the second run.
func Run(ctx context.Context, cfg workload.Config, target driver.Target, label string) (*driver.Result, *Report, error) {
	alone := cfg
	alone.Overload.StandardRate, alone.Overload.BackgroundRate = -1, -1
	var basePlan []arrival
	if cfg.Overload.InteractiveRate > 0 {
		basePlan = planArrivals(alone, overloadBaselineIDs)
	}
	baseline, _ := driver.Measure(ctx, cfg, target, label+" baseline", len(basePlan), func(ctx context.Context, dr *driver.Runner) {
		r := runner{dr}
		r.arrivals(ctx, basePlan, nil)
	})
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("bench: overload baseline: %w", err)
	}
	plan := planArrivals(cfg, overloadIDs)
	retryAfter := map[string]int{}
	res, samples := driver.Measure(ctx, cfg, target, label, len(plan), func(ctx context.Context, dr *driver.Runner) {
		r := runner{dr}
		r.arrivals(ctx, plan, retryAfter)
	})
	res.API = workload.APIChat
	rep := reportOf(samples, retryAfter, res, cfg.Overload.Duration.D())
	if b := baseline.ByBand[workload.BandInteractive]; b != nil {
		rep.BaselineInteractiveP50Ms, rep.BaselineInteractiveP99Ms = b.TTFT.P50Ms, b.TTFT.P99Ms
		if i := rep.Bands[workload.BandInteractive]; i != nil && b.TTFT.P99Ms > 0 {
			rep.InteractiveP99Ratio = i.TTFTP99Ms / b.TTFT.P99Ms
		}
	}
	return res, rep, nil
}

// arrivals sends plan open loop, each request when due, and counts the
// sheds that carried a Retry-After in retryAfter by band (nil: none).
func (r runner) arrivals(ctx context.Context, plan []arrival, retryAfter map[string]int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, a := range plan {
		if !driver.SleepUntil(ctx, r.Started().Add(a.at)) || r.Stopped(ctx) {
			break
		}
		wg.Go(func() {
			c := driver.Call{
				API:       workload.APIChat,
				Key:       r.TenantKey(0),
				Priority:  a.band,
				Input:     []workload.Item{{Kind: workload.ItemMessage, Role: "user", Text: a.req.Prompt()}},
				MaxTokens: a.req.MaxOutputTokens,
			}
			smp, wait := r.Do(ctx, c, driver.Labels{Tenant: a.band, Turn: i, Kind: workload.TurnSingle})
			if retryAfter != nil && smp != nil && shed(smp) && wait > 0 {
				mu.Lock()
				retryAfter[a.band]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// reportOf sums the samples per band.
func reportOf(samples []*driver.Sample, retryAfter map[string]int, res *driver.Result, arrivals time.Duration) *Report {
	rep := &Report{Bands: map[string]*Band{}}
	if arrivals > 0 {
		rep.OfferedPerSecond = float64(len(samples)) / arrivals.Seconds()
	}
	for band, group := range driver.GroupBy(samples, func(s *driver.Sample) string { return s.Band }) {
		sum := driver.Aggregate(group, time.Second)
		b := &Band{
			Offered:            sum.Requests,
			Completed:          sum.Succeeded,
			ShedWithRetryAfter: retryAfter[band],
			TTFTP50Ms:          sum.TTFT.P50Ms,
			TTFTP99Ms:          sum.TTFT.P99Ms,
		}
		for _, s := range group {
			switch {
			case s.Error == "":
			case shed(s):
				b.Shed++
				if b.Reasons == nil {
					b.Reasons = map[string]int{}
				}
				b.Reasons[s.DroppedReason]++
			default:
				b.Errors++
			}
		}
		rep.Bands[band] = b
	}
	if o := res.Occupancy; o != nil {
		rep.IdleWhileQueuedSeconds = o.IdleWhileQueuedSeconds
		rep.MaxGatewayQueued = o.MaxGatewayQueued
	}
	return rep
}

// runner is the driver's runner with the scenario's own ways of sending.
type runner struct{ *driver.Runner }
