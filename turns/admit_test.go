package turns

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func newTestController(t testing.TB, cfg Config, opts ...Option) (*Controller, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	opts = append([]Option{WithClock(clock.Now), WithRegisterer(prometheus.NewRegistry()), withoutTicker()}, opts...)
	c, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c, clock
}

// admitOnce runs the admission decision for a turn of band from tenant at
// the given saturation and undoes its charges, as if the turn ended.
func admitOnce(c *Controller, tenant string, band Band, m *Measurement) *ShedError {
	cfg := c.cfg.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &waiter{band: band, cost: 100, pool: c.poolLocked(newFakeCapacity("p", 1, 1, 0)), tenant: c.tenantLocked(tenant, c.tenants.Load())}
	err := c.admitLocked(w, m.measured(), cfg)
	if err == nil {
		c.unholdLocked(w.tenant, w.cost)
	}
	return err
}

func TestShedCurve(t *testing.T) {
	curve := ShedCurve{Start: 0.8, Full: 1.0, MaxProbability: 1, Exponent: 2}
	linear := ShedCurve{Start: 0.5, Full: 0.9, MaxProbability: 0.8, Exponent: 1}
	for _, tc := range []struct {
		curve ShedCurve
		s     float64
		want  float64
	}{
		{curve, 0, 0},
		{curve, 0.79, 0},
		{curve, 0.8, 0},
		{curve, 0.85, 0.0625},
		{curve, 0.9, 0.25},
		{curve, 0.95, 0.5625},
		{curve, 1, 1},
		{linear, 0.5, 0},
		{linear, 0.7, 0.4},
		{linear, 0.9, 0.8},
		{linear, 1, 0.8},
	} {
		t.Run(fmt.Sprintf("%+v/s=%g", tc.curve, tc.s), func(t *testing.T) {
			if got := shedProbability(&tc.curve, tc.s); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("p(%g) = %g, want %g", tc.s, got, tc.want)
			}
		})
	}
}

// TestAdmitterShedRate checks the admitter against the curve with a seeded
// source: the share of Background turns shed at each saturation, and that
// Interactive turns are never shed at any.
func TestAdmitterShedRate(t *testing.T) {
	c, _ := newTestController(t, Config{}, WithRandom(rand.New(rand.NewPCG(42, 42)).Float64))
	cfg := c.Config()
	const draws = 20000
	for _, s := range []float64{0, 0.5, 0.8, 0.85, 0.9, 0.95, 0.99, 1} {
		t.Run(fmt.Sprintf("saturation=%g", s), func(t *testing.T) {
			m := Measurement{Saturation: s, Endpoints: 1, Slots: 1}
			shed := map[Band]int{}
			for range draws {
				for _, b := range Bands {
					if err := admitOnce(c, "a", b, &m); err != nil {
						if err.Reason != ReasonSaturated || err.Status != 503 {
							t.Fatalf("%v shed with %v", b, err)
						}
						shed[b]++
					}
				}
			}
			want := shedProbability(&cfg.Shed, s)
			if got := float64(shed[Background]) / draws; math.Abs(got-want) > 0.015 {
				t.Errorf("background shed rate %.4f, want %.4f ± 0.015", got, want)
			}
			if shed[Interactive] != 0 {
				t.Errorf("interactive shed %d times", shed[Interactive])
			}
			if shed[Standard] != 0 {
				t.Errorf("standard from a lone tenant shed %d times", shed[Standard])
			}
		})
	}
}

func TestAdmitterOverShare(t *testing.T) {
	always := func() float64 { return 0 }
	c, _ := newTestController(t, Config{Tenants: []Tenant{{Name: "big", Weight: 3}, {Name: "small"}}}, WithRandom(always))
	m := Measurement{Saturation: 1, Endpoints: 1, Slots: 1}
	hold := func(tenant string, tokens int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.holdLocked(c.tenantLocked(tenant, c.tenants.Load()), tokens)
	}
	hold("big", 700)
	hold("small", 200)
	// big: 800 of 1000 tokens > 3/4; small: 300 of 1000 > 1/4.
	for _, tenant := range []string{"big", "small"} {
		if err := admitOnce(c, tenant, Standard, &m); err == nil || err.Reason != ReasonOverShare || err.Status != 429 {
			t.Errorf("%s: got %v, want 429 over-share", tenant, err)
		}
	}
	hold("small", 300)
	// big: 800 of 1300 < 3/4.
	if err := admitOnce(c, "big", Standard, &m); err != nil {
		t.Errorf("big within its share: %v", err)
	}
	if err := admitOnce(c, "big", Interactive, &m); err != nil {
		t.Errorf("interactive: %v", err)
	}
}

func TestShedErrorRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {30 * time.Second, 30}} {
		if got := (&ShedError{RetryAfter: tc.d}).RetryAfterSeconds(); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
