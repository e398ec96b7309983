package kv

import (
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports, at scrape time, each endpoint's slice of the index
// (blocks and capacity per tier, evictions, staleness) and its KV event
// subscriber's counters. The request path pays nothing for it.
type Collector struct {
	index *Index

	mu struct {
		sync.Mutex
		// protects the fields below
		subs map[int]*Subscriber
	}
	// names labels endpoint i as names[i]; guarded by mu.
	names []string
}

// NewCollector exports ix's per-endpoint state, labelling endpoint i with
// names[i].
func NewCollector(ix *Index, names []string) *Collector {
	c := &Collector{index: ix, names: names}
	c.mu.subs = map[int]*Subscriber{}
	return c
}

// AddSubscriber exports s's counters under its endpoint's label.
func (c *Collector) AddSubscriber(endpoint int, s *Subscriber) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.subs[endpoint] = s
}

// SetName labels endpoint (0 ≤ endpoint < MaxEndpoints) with name from
// now on, for a fleet whose endpoints come and go; "" exports nothing of
// it, and forgets its subscriber.
func (c *Collector) SetName(endpoint int, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if endpoint < 0 || endpoint >= MaxEndpoints {
		panic(fmt.Sprintf("kv: endpoint id %d out of range [0, %d)", endpoint, MaxEndpoints))
	}
	if endpoint >= len(c.names) {
		c.names = append(c.names, make([]string, endpoint+1-len(c.names))...)
	}
	c.names[endpoint] = name
	if name == "" {
		delete(c.mu.subs, endpoint)
	}
}

var (
	descIndexBlocks = prometheus.NewDesc("turnpike_kv_index_endpoint_blocks",
		"KV-cache blocks the index believes the endpoint holds, by tier; in hbm, routing's records and the KV events' reports, a block both report counting twice.", []string{"endpoint", "tier"}, nil)
	descIndexCapacity = prometheus.NewDesc("turnpike_kv_index_endpoint_capacity_blocks",
		"Bound on the blocks the index keeps for the endpoint, by tier (the engine's reported capacity when known).", []string{"endpoint", "tier"}, nil)
	descIndexEvictions = prometheus.NewDesc("turnpike_kv_index_endpoint_evictions_total",
		"Blocks the index dropped for the endpoint's capacity.", []string{"endpoint"}, nil)
	descIndexStale = prometheus.NewDesc("turnpike_kv_index_endpoint_stale",
		"1 while the endpoint's index is stale (a gap in its KV events).", []string{"endpoint"}, nil)
	descEvents = prometheus.NewDesc("turnpike_kv_events_total",
		"KV events applied from the endpoint's publisher.", []string{"endpoint"}, nil)
	descSkipped = prometheus.NewDesc("turnpike_kv_events_skipped_total",
		"KV events that could not be mapped onto the gateway's hashes.", []string{"endpoint"}, nil)
	descGaps = prometheus.NewDesc("turnpike_kv_event_gaps_total",
		"Gaps in the endpoint's event sequence numbers.", []string{"endpoint"}, nil)
	descDecodeErrors = prometheus.NewDesc("turnpike_kv_event_decode_errors_total",
		"KV event messages that could not be decoded.", []string{"endpoint"}, nil)
	descReconnects = prometheus.NewDesc("turnpike_kv_event_reconnects_total",
		"KV event connections lost or failed.", []string{"endpoint"}, nil)
	descConnected = prometheus.NewDesc("turnpike_kv_event_connected",
		"1 while the endpoint's KV event socket is connected.", []string{"endpoint"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIndexBlocks, descIndexCapacity, descIndexEvictions, descIndexStale,
		descEvents, descSkipped, descGaps, descDecodeErrors, descReconnects, descConnected} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	c.mu.Lock()
	names := slices.Clone(c.names)
	c.mu.Unlock()
	for i, name := range names {
		if name == "" {
			continue
		}
		st := c.index.EndpointStats(i)
		for t := Tier(0); t < NumTiers; t++ {
			if st.Capacity[t] == 0 && st.Blocks[t] == 0 {
				continue
			}
			gauge(descIndexBlocks, float64(st.Blocks[t]), name, t.String())
			gauge(descIndexCapacity, float64(st.Capacity[t]), name, t.String())
		}
		counter(descIndexEvictions, st.Evictions, name)
		gauge(descIndexStale, boolValue(st.Stale), name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.mu.subs {
		if i < 0 || i >= len(c.names) || c.names[i] == "" {
			continue
		}
		name, st := c.names[i], s.Stats()
		counter(descEvents, st.Events, name)
		counter(descSkipped, st.Skipped, name)
		counter(descGaps, st.Gaps, name)
		counter(descDecodeErrors, st.DecodeErrors, name)
		counter(descReconnects, st.Reconnects, name)
		gauge(descConnected, boolValue(st.Connected), name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var _ prometheus.Collector = (*Collector)(nil)
