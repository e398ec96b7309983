package scrape

import (
	"context"
	"math"
	"net/http"
	neturl "net/url"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
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
	// IdleWhileQueuedSeconds counts the wall seconds of the samples (each
	// standing for its interval, IntervalSeconds) at which the gateway's
	// queue was not empty while an engine had free room: no
	// request waiting in its own queue, fewer running than its
	// max_num_seqs (when it reports one) and KV cache to spare (under
	// kvFull in use). The requests the gateway already has in flight to an
	// engine beyond those it counts running or waiting were sent and are
	// still being read or queued by it: they take its room though its own
	// gauges do not show them yet, a sequence each and its running
	// sequences' mean KV cache each. A work-conserving gateway keeps this at
	// zero.
	IdleWhileQueuedSeconds int `json:"idle_while_queued_seconds"`
	// MaxGatewayQueued is the longest gateway queue seen.
	MaxGatewayQueued float64 `json:"max_gateway_queued"`
	// idleSeconds is IdleWhileQueuedSeconds before rounding.
	idleSeconds float64
}

// OccupancySample is one sample of the fleet.
type OccupancySample struct {
	// AtSeconds is the time from the run's start.
	AtSeconds float64 `json:"at_s"`
	// Running and Waiting are per engine; -1 where a scrape failed.
	Running []float64 `json:"running"`
	Waiting []float64 `json:"waiting"`
	// Sent is per engine, the requests the gateway had in flight to it
	// (turnpike_endpoint_in_flight_requests, its peers' included, matched
	// by the host and port of the engine's metrics URL as written: a pool
	// that names the engine otherwise shows -1); -1 where the gateway did
	// not say.
	Sent []float64 `json:"sent,omitempty"`
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

// OccupancyInterval spaces the samples on the fleet's clock: one a
// second of the hardware modelled.
const OccupancyInterval = time.Second

// Engine labels and gauges the occupancy reads (vLLM's and SGLang's
// names), and the gateway's.
var (
	labelsMaxSeqs  = []string{enginemetrics.VLLMCacheConfigInfo + "." + enginemetrics.LabelMaxNumSeqs, enginemetrics.SGLangCacheConfigInfo + "." + enginemetrics.LabelMaxRunningRequests}
	gatewayQueued  = "turnpike_turns_queued"
	gatewayInWork  = []string{"turnpike_endpoint_in_flight_requests", "turnpike_endpoint_peer_in_flight_requests"}
	gatewayEPLabel = "endpoint"
)

// kvFull is the KV cache use at which an engine is taken to have no room
// for another prompt, though it queues nothing yet: its next request
// would wait for blocks.
const kvFull = 0.9

// hasRoom reports whether an engine, as scraped, could start another
// sequence now, given that the gateway has sent it requests in flight
// (negative: unknown). Those it counts neither running nor waiting are on
// their way into it: they take a sequence each, and as much KV cache as
// its running sequences hold on average (nothing known when it runs none
// yet).
func hasRoom(m EngineMetrics, sent float64) bool {
	running, kv := firstOf(m, gaugesRunning), firstOf(m, gaugesKV)
	waiting := firstOf(m, gaugesWaiting)
	if waiting > 0 || kv >= kvFull {
		return false
	}
	if coming := sent - running - waiting; coming > 0 {
		if running > 0 {
			kv += coming * kv / running
		}
		running += coming
		if kv >= kvFull {
			return false
		}
	}
	for _, n := range labelsMaxSeqs {
		if limit, ok := m[n]; ok && limit > 0 {
			return running < limit
		}
	}
	return true
}

// gatewayScrape is what the occupancy reads from the gateway: its
// metrics summed by family, and its requests in flight by endpoint (host
// and port, as the gateway names an endpoint).
type gatewayScrape struct {
	metrics  EngineMetrics
	inFlight map[string]float64
}

// sample folds one scrape of the engines (hosts[i] names engine i as the
// gateway does) and the gateway into a sample.
func occupancySample(at time.Duration, engines []EngineMetrics, hosts []string, gateway *gatewayScrape) OccupancySample {
	s := OccupancySample{AtSeconds: at.Seconds(), GatewayQueued: -1}
	room := false
	for i, m := range engines {
		sent := -1.0
		if gateway != nil && i < len(hosts) {
			if v, ok := gateway.inFlight[hosts[i]]; ok {
				sent = v
			}
		}
		s.Sent = append(s.Sent, sent)
		if m == nil {
			s.Running = append(s.Running, -1)
			s.Waiting = append(s.Waiting, -1)
			s.KVUsage = append(s.KVUsage, -1)
			continue
		}
		s.Running = append(s.Running, firstOf(m, gaugesRunning))
		s.Waiting = append(s.Waiting, firstOf(m, gaugesWaiting))
		s.KVUsage = append(s.KVUsage, firstOf(m, gaugesKV))
		room = room || hasRoom(m, sent)
	}
	if gateway != nil {
		s.GatewayQueued = gateway.metrics[gatewayQueued]
	}
	s.IdleWhileQueued = room && s.GatewayQueued > 0
	return s
}

// scrapeOccupancy reads the gateway's /metrics for the occupancy.
func scrapeOccupancy(ctx context.Context, cl *http.Client, url string) (*gatewayScrape, error) {
	fams, err := Families(ctx, cl, url)
	if err != nil {
		return nil, err
	}
	return gatewayScrapeOf(fams), nil
}

func gatewayScrapeOf(fams map[string]*dto.MetricFamily) *gatewayScrape {
	g := &gatewayScrape{metrics: sumFamilies(fams), inFlight: map[string]float64{}}
	for _, name := range gatewayInWork {
		byLabel(fams, name, gatewayEPLabel, g.inFlight)
	}
	return g
}

// engineHosts names each engine of a metrics URL by its host and port.
func engineHosts(urls []string) []string {
	hosts := make([]string, len(urls))
	for i, u := range urls {
		if p, err := neturl.Parse(u); err == nil {
			hosts[i] = p.Host
		}
	}
	return hosts
}

func (o *Occupancy) add(s OccupancySample) {
	o.Samples = append(o.Samples, s)
	if s.IdleWhileQueued {
		o.idleSeconds += o.IntervalSeconds
		o.IdleWhileQueuedSeconds = int(math.Round(o.idleSeconds))
	}
	o.MaxGatewayQueued = max(o.MaxGatewayQueued, s.GatewayQueued)
}

// SampleOccupancy scrapes the engines and the gateway every interval of
// wall time from start until the returned stop is called, which waits for
// the sampler and returns what it saw (nil without engines or without a
// sample).
func SampleOccupancy(ctx context.Context, engines []string, gateway string, start time.Time, every time.Duration) (stop func() *Occupancy) {
	if len(engines) == 0 {
		return func() *Occupancy { return nil }
	}
	if every <= 0 {
		every = OccupancyInterval
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan *Occupancy, 1)
	hosts := engineHosts(engines)
	go func() {
		o := &Occupancy{IntervalSeconds: every.Seconds()}
		cl := &http.Client{Timeout: 5 * every} // a loaded host answers slowly
		t := time.NewTicker(every)
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
			ms, _ := All(ctx, engines)
			var gs *gatewayScrape
			if gateway != "" {
				gs, _ = scrapeOccupancy(ctx, cl, gateway)
			}
			if ctx.Err() == nil {
				o.add(occupancySample(time.Since(start), ms, hosts, gs))
			}
		}
	}()
	return func() *Occupancy { cancel(); return <-done }
}
