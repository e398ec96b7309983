package turns

import (
	"math"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

type fakeEndpoint struct {
	available, stale bool
	load             pools.Load
	inFlightTokens   int64
}

func (e *fakeEndpoint) Available() bool       { return e.available }
func (e *fakeEndpoint) Stale(time.Time) bool  { return e.stale }
func (e *fakeEndpoint) Load() pools.Load      { return e.load }
func (e *fakeEndpoint) InFlightTokens() int64 { return e.inFlightTokens }

var _ endpointLoad = (*fakeEndpoint)(nil)

func TestMeasure(t *testing.T) {
	var cfg FlowControl
	cfg.EnsureDefaults() // queue depth 5, KV 0.8, 131072 tokens, 64 slots
	now := time.Now()
	idle := func() *fakeEndpoint { return &fakeEndpoint{available: true} }
	for _, tc := range []struct {
		name string
		eps  []*fakeEndpoint
		want Measurement
	}{
		{"no endpoints", nil, Measurement{Saturation: 1}},
		{"none available", []*fakeEndpoint{{available: false}}, Measurement{Saturation: 1}},
		{"idle", []*fakeEndpoint{idle(), idle()}, Measurement{Saturation: 0, Endpoints: 2, Slots: 128}},
		{"queue depth", []*fakeEndpoint{{available: true, load: pools.Load{Waiting: 2}}}, Measurement{Saturation: 0.4, Endpoints: 1, Slots: 64}},
		{"kv is the largest ratio", []*fakeEndpoint{{available: true, load: pools.Load{Waiting: 1, KVUsage: 0.6}}}, Measurement{Saturation: 0.75, Endpoints: 1, Slots: 64}},
		{"in-flight tokens", []*fakeEndpoint{{available: true, inFlightTokens: 65536}}, Measurement{Saturation: 0.5, Endpoints: 1, Slots: 64}},
		{"capped at 1", []*fakeEndpoint{{available: true, load: pools.Load{Waiting: 50}}}, Measurement{Saturation: 1, Endpoints: 1, Slots: 64}},
		{"stale is saturated", []*fakeEndpoint{{available: true, stale: true}, idle()}, Measurement{Saturation: 0.5, Endpoints: 2, Slots: 128}},
		{"unavailable endpoints are left out", []*fakeEndpoint{{available: false, stale: true}, idle()}, Measurement{Saturation: 0, Endpoints: 1, Slots: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := measure(tc.eps, now, &cfg)
			if math.Abs(got.Saturation-tc.want.Saturation) > 1e-9 || got.Endpoints != tc.want.Endpoints || got.Slots != tc.want.Slots {
				t.Fatalf("measure = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestEndpointSaturationReadsPools reads a real *pools.Endpoint's load view.
func TestEndpointSaturationReadsPools(t *testing.T) {
	var cfg FlowControl
	cfg.EnsureDefaults()
	now := time.Now()
	e := &pools.Endpoint{ID: "e"}
	if s := endpointSaturation(e, now, &cfg.Saturation); s != 1 {
		t.Fatalf("never scraped: saturation %g, want 1", s)
	}
	e.SetLoad(pools.Load{Waiting: 1, KVUsage: 0.4, ScrapedAt: now})
	if s := endpointSaturation(e, now, &cfg.Saturation); math.Abs(s-0.5) > 1e-9 {
		t.Fatalf("saturation %g, want 0.5", s)
	}
}
