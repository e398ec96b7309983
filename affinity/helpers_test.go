package affinity

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/pools"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newFleet builds one pool of n endpoints serving model "m", all healthy.
func newFleet(t testing.TB, n int) *pools.Registry {
	t.Helper()
	return newFleetURLs(t, n, nil)
}

func newFleetURLs(t testing.TB, n int, urls []string) *pools.Registry {
	t.Helper()
	var eps []pools.EndpointConfig
	for i := range n {
		u := fmt.Sprintf("http://10.0.%d.%d:8000", i/250, i%250+1)
		if i < len(urls) {
			u = urls[i]
		}
		eps = append(eps, pools.EndpointConfig{URL: u})
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{
		Name: "p", ServedModels: []string{"m"}, Endpoints: eps,
	}}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// seqRand is a deterministic, concurrency-safe source of random bits.
func seqRand(seed uint64) func() uint64 {
	var n atomic.Uint64
	n.Store(seed)
	return func() uint64 { return mix(n.Add(1), 0) }
}

// setWaiting publishes a fresh load report with waiting requests and KV usage.
func setLoad(ep *pools.Endpoint, waiting int, kvUsage float64, at time.Time) {
	ep.SetLoad(pools.Load{Waiting: waiting, KVUsage: kvUsage, ScrapedAt: at})
}

// counters prints the nonzero counters of the named families in r.
func counters(t testing.TB, r *prometheus.Registry, names ...string) string {
	t.Helper()
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		want := false
		for _, n := range names {
			want = want || mf.GetName() == n
		}
		if !want {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			if v == 0 {
				continue
			}
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			lines = append(lines, fmt.Sprintf("%s{%s} %v", mf.GetName(), strings.Join(labels, ","), v))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
