package bench

import (
	"context"
	"net/http"
	"time"
)

// Occupancy is the fleet sampled once a second through a run: each
// engine's running and waiting sequences and the gateway's own queue, and
// how many of those seconds the gateway held turns while an engine had
// room for them.
type Occupancy struct {
	// IntervalSeconds is the time between samples.
	IntervalSeconds float64 `json:"interval_seconds"`
	// Samples are in time order.
	Samples []OccupancySample `json:"samples"`
	// IdleWhileQueuedSeconds counts the samples (one a second) at which the
	// gateway's queue was not empty while an engine had free room: no
	// request waiting in its own queue, fewer running than its
	// max_num_seqs (when it reports one) and KV cache to spare (under
	// kvFull in use). A work-conserving gateway keeps this at zero.
	IdleWhileQueuedSeconds int `json:"idle_while_queued_seconds"`
	// MaxGatewayQueued is the longest gateway queue seen.
	MaxGatewayQueued float64 `json:"max_gateway_queued"`
}

// OccupancySample is one sample of the fleet.
type OccupancySample struct {
	// AtSeconds is the time from the run's start.
	AtSeconds float64 `json:"at_s"`
	// Running and Waiting are per engine; -1 where a scrape failed.
	Running []float64 `json:"running"`
	Waiting []float64 `json:"waiting"`
	// KVUsage is per engine, the fraction of its KV cache in use; -1
	// where a scrape failed.
	KVUsage []float64 `json:"kv_usage"`
	// GatewayQueued is the turns queued in the gateway's flow control
	// (turnpike_turns_queued summed), -1 when its scrape failed.
	GatewayQueued float64 `json:"gateway_queued"`
	// IdleWhileQueued marks a sample where the gateway queued turns while
	// an engine had free room.
	IdleWhileQueued bool `json:"idle_while_queued,omitempty"`
}

// occupancyInterval spaces the samples.
const occupancyInterval = time.Second

// Engine labels and gauges the occupancy reads (vLLM's and SGLang's names).
var (
	labelsMaxSeqs = []string{"vllm:cache_config_info.max_num_seqs", "sglang:cache_config_info.max_running_requests"}
	gatewayQueued = "turnpike_turns_queued"
)

// kvFull is the KV cache use at which an engine is taken to have no room
// for another prompt, though it queues nothing yet: its next request
// would wait for blocks.
const kvFull = 0.9

// hasRoom reports whether an engine, as scraped, could start another
// sequence now.
func hasRoom(m EngineMetrics) bool {
	if firstOf(m, gaugesWaiting) > 0 || firstOf(m, gaugesKV) >= kvFull {
		return false
	}
	for _, n := range labelsMaxSeqs {
		if limit, ok := m[n]; ok && limit > 0 {
			return firstOf(m, gaugesRunning) < limit
		}
	}
	return true
}

// sample folds one scrape of the engines and the gateway into a sample.
func occupancySample(at time.Duration, engines []EngineMetrics, gateway EngineMetrics) OccupancySample {
	s := OccupancySample{AtSeconds: at.Seconds(), GatewayQueued: -1}
	room := false
	for _, m := range engines {
		if m == nil {
			s.Running = append(s.Running, -1)
			s.Waiting = append(s.Waiting, -1)
			s.KVUsage = append(s.KVUsage, -1)
			continue
		}
		s.Running = append(s.Running, firstOf(m, gaugesRunning))
		s.Waiting = append(s.Waiting, firstOf(m, gaugesWaiting))
		s.KVUsage = append(s.KVUsage, firstOf(m, gaugesKV))
		room = room || hasRoom(m)
	}
	if gateway != nil {
		s.GatewayQueued = gateway[gatewayQueued]
	}
	s.IdleWhileQueued = room && s.GatewayQueued > 0
	return s
}

func (o *Occupancy) add(s OccupancySample) {
	o.Samples = append(o.Samples, s)
	if s.IdleWhileQueued {
		o.IdleWhileQueuedSeconds++
	}
	o.MaxGatewayQueued = max(o.MaxGatewayQueued, s.GatewayQueued)
}

// sampleOccupancy scrapes the engines and the gateway every
// occupancyInterval from start until the returned stop is called, which
// waits for the sampler and returns what it saw (nil without engines or
// without a sample).
func sampleOccupancy(ctx context.Context, engines []string, gateway string, start time.Time) (stop func() *Occupancy) {
	if len(engines) == 0 {
		return func() *Occupancy { return nil }
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan *Occupancy, 1)
	go func() {
		o := &Occupancy{IntervalSeconds: occupancyInterval.Seconds()}
		cl := &http.Client{Timeout: 5 * occupancyInterval} // a loaded host answers slowly
		t := time.NewTicker(occupancyInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				if len(o.Samples) == 0 {
					o = nil
				}
				done <- o
				return
			case <-t.C:
			}
			ms, _ := scrapeAll(ctx, engines)
			var gm EngineMetrics
			if gateway != "" {
				gm, _ = scrape(ctx, cl, gateway)
			}
			if ctx.Err() == nil {
				o.add(occupancySample(time.Since(start), ms, gm))
			}
		}
	}()
	return func() *Occupancy { cancel(); return <-done }
}
