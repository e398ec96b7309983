package turns

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultTargetUtilization is the share of a pool's slots the desired
// replicas estimate aims to keep busy.
const DefaultTargetUtilization = 0.8

// holdSmoothing is the weight of the newest hold in a pool's smoothed
// hold time.
const holdSmoothing = 0.05

// noteHold folds one ticket's hold into the pool's smoothed hold time.
func (pq *poolQueue) noteHold(d time.Duration) {
	s := d.Seconds()
	if pq.hold == 0 {
		pq.hold = s
		return
	}
	pq.hold += holdSmoothing * (s - pq.hold)
}

// Demand is one pool's load as an autoscaler reads it.
type Demand struct {
	Pool string
	// Queued and QueuedTokens are the turns waiting in the pool's queues,
	// by band, and their tokens; Dispatched and DispatchedTokens those
	// running (tickets outstanding, lent room's included).
	Queued           [numBands]int
	QueuedTokens     int64
	Dispatched       int
	DispatchedTokens int64
	// Saturation, Endpoints and Slots are the pool's measurement now.
	Saturation float64
	Endpoints  int
	Slots      int
	// Wait is, by band, the queue wait predicted for a turn of the band
	// that arrives now: the turns queued in its band and the more urgent
	// ones, each holding a slot for the pool's smoothed hold time, over
	// the pool's slots. Zero while nothing waits.
	Wait [numBands]time.Duration
	// Desired is the replicas that would serve the pool's turns, running
	// and queued, at the target utilization of each replica's slots; 1
	// when turns wait on a pool with no endpoint, 0 when it has none.
	Desired int
}

// Demands measures every pool the Controller has seen.
func (c *Controller) Demands() []Demand {
	cfg := c.cfg.Load()
	now := c.now()
	c.mu.Lock()
	pqs := make([]*poolQueue, 0, len(c.mu.pools))
	caps := make([]Capacity, 0, len(c.mu.pools))
	for _, pq := range c.mu.pools {
		// The pool's capacity is read under the lock: Acquire sets it anew.
		pqs, caps = append(pqs, pq), append(caps, pq.cap)
	}
	c.mu.Unlock()
	out := make([]Demand, 0, len(pqs))
	for i, pq := range pqs {
		// Measured outside the lock, as Acquire measures.
		m := caps[i].Measure(now, cfg)
		c.mu.Lock()
		d := Demand{Pool: pq.name, Dispatched: pq.dispatched + pq.lentDispatched, DispatchedTokens: pq.dispatchedTokens,
			Saturation: m.Saturation, Endpoints: m.Endpoints, Slots: m.Slots}
		ahead := 0
		for i := range pq.bands {
			bq := &pq.bands[i]
			d.Queued[i], d.QueuedTokens = bq.count, d.QueuedTokens+bq.tokens
		}
		hold := pq.hold
		c.mu.Unlock()
		// Bands are in order of urgency: a turn waits behind its own band
		// and those before it.
		for i, n := range d.Queued {
			ahead += n
			if ahead > 0 && m.Slots > 0 {
				d.Wait[i] = time.Duration(float64(ahead) * hold / float64(m.Slots) * float64(time.Second))
			}
		}
		demand := d.Dispatched + ahead
		switch {
		case m.Endpoints == 0 || m.Slots == 0:
			if demand > 0 {
				d.Desired = 1
			}
		default:
			perReplica := float64(m.Slots) / float64(m.Endpoints) * cfg.TargetUtilization
			d.Desired = int(math.Ceil(float64(demand) / perReplica))
		}
		out = append(out, d)
	}
	return out
}

// demandCollector exports Demands at every scrape.
type demandCollector struct {
	c                                   *Controller
	queued, queuedTokens, dispatchedTok *prometheus.Desc
	wait, desired                       *prometheus.Desc
}

func newDemandCollector(c *Controller) *demandCollector {
	return &demandCollector{c: c,
		queued:        prometheus.NewDesc("turnpike_pool_queued_turns", "Turns waiting in the pool's flow-control queues, by band: an autoscaler's backlog.", []string{"pool", "band"}, nil),
		queuedTokens:  prometheus.NewDesc("turnpike_pool_queued_tokens", "Tokens (prompt and expected output) of the turns waiting in the pool's queues.", []string{"pool"}, nil),
		dispatchedTok: prometheus.NewDesc("turnpike_pool_inflight_tokens", "Tokens (prompt and expected output) of the turns the pool is running.", []string{"pool"}, nil),
		wait:          prometheus.NewDesc("turnpike_pool_predicted_wait_seconds", "Queue wait predicted for a turn of the band arriving now: the turns ahead of it, each holding a slot for the pool's smoothed hold time, over the pool's slots.", []string{"pool", "band"}, nil),
		desired:       prometheus.NewDesc("turnpike_pool_desired_replicas", "Replicas that would run the pool's turns, running and queued, at flowControl.targetUtilization of each replica's slots; 1 when turns wait on a pool with none.", []string{"pool"}, nil),
	}
}

func (dc *demandCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dc.queued, dc.queuedTokens, dc.dispatchedTok, dc.wait, dc.desired} {
		ch <- d
	}
}

func (dc *demandCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range dc.c.Demands() {
		for i, b := range Bands {
			ch <- prometheus.MustNewConstMetric(dc.queued, prometheus.GaugeValue, float64(d.Queued[i]), d.Pool, b.String())
			ch <- prometheus.MustNewConstMetric(dc.wait, prometheus.GaugeValue, d.Wait[i].Seconds(), d.Pool, b.String())
		}
		ch <- prometheus.MustNewConstMetric(dc.queuedTokens, prometheus.GaugeValue, float64(d.QueuedTokens), d.Pool)
		ch <- prometheus.MustNewConstMetric(dc.dispatchedTok, prometheus.GaugeValue, float64(d.DispatchedTokens), d.Pool)
		ch <- prometheus.MustNewConstMetric(dc.desired, prometheus.GaugeValue, float64(d.Desired), d.Pool)
	}
}
