package turns

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

var benchTenants = []Tenant{
	{Name: "a", Weight: 3, Quota: Quota{RequestsPerMinute: 1 << 30, TokensPerMinute: 1 << 50, Concurrent: 1 << 20}},
	{Name: "b", Quota: Quota{RequestsPerMinute: 1 << 30, TokensPerMinute: 1 << 50, Concurrent: 1 << 20}},
}

// BenchmarkAdmit is the admission decision alone: quotas, the shed curve,
// fair share and queue caps, for a turn that is admitted.
func BenchmarkAdmit(b *testing.B) {
	for _, band := range Bands {
		b.Run(band.String(), func(b *testing.B) {
			c, _ := newTestController(b, Config{Tenants: benchTenants}, WithRandom(rand.New(rand.NewPCG(1, 2)).Float64))
			cfg := c.cfg.Load()
			m := Measurement{Saturation: 0.5, Endpoints: 4, Slots: 256}
			c.mu.Lock()
			w := &waiter{band: band, cost: 1200, pool: c.poolLocked(newFakeCapacity("p", 4, 256, 0.5)), tenant: c.tenantLocked("a", c.tenants.Load())}
			c.mu.Unlock()
			b.ReportAllocs()
			for b.Loop() {
				c.mu.Lock()
				if err := c.admitLocked(w, &m, cfg); err != nil {
					b.Fatal(err)
				}
				c.unholdLocked(w.tenant, w.cost)
				c.mu.Unlock()
			}
		})
	}
}

// BenchmarkEnqueueDequeue is a turn's whole trip through the Controller,
// Acquire to Release, from parallel goroutines across tenants and sessions.
// With room every turn is queued and dispatched at once; contended, the
// pool has 4 slots for 8 goroutines per CPU, and turns wait for each other.
func BenchmarkEnqueueDequeue(b *testing.B) {
	for _, bc := range []struct {
		name        string
		slots       int
		parallelism int
	}{{"room", 1 << 20, 1}, {"contended", 4, 8}} {
		b.Run(bc.name, func(b *testing.B) {
			c, _ := newTestController(b, Config{Tenants: benchTenants})
			pool := newFakeCapacity("p", 4, bc.slots, 0.5)
			var next atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(bc.parallelism)
			b.RunParallel(func(pb *testing.PB) {
				g := next.Add(1)
				sessions := make([]string, 16)
				for i := range sessions {
					sessions[i] = "s" + strconv.FormatUint(g, 10) + "-" + strconv.Itoa(i)
				}
				ctx := context.Background()
				i := 0
				for pb.Next() {
					i++
					turn := Turn{Tenant: benchTenants[i%2].Name, Band: Bands[i%numBands], SessionKey: sessions[i%len(sessions)], InputTokens: 1000, ExpectedOutputTokens: 200, Warm: i%3 == 0}
					tk, err := c.Acquire(ctx, &turn, pool)
					if err != nil {
						b.Error(err)
						return
					}
					tk.Release(1100)
				}
			})
		})
	}
}

// TestHotPathAllocations proves admission and an uncontended Acquire and
// Release allocate nothing once the tenant and pool are known.
func TestHotPathAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	c, _ := newTestController(t, Config{Tenants: benchTenants})
	pool := newFakeCapacity("p", 4, 1<<20, 0.5)
	var capacity Capacity = pool
	turn := Turn{Tenant: "a", Band: Standard, SessionKey: "s", InputTokens: 1000}
	ctx := context.Background()
	run := func() {
		tk, err := c.Acquire(ctx, &turn, capacity)
		if err != nil {
			t.Fatal(err)
		}
		tk.Release(900)
	}
	run()
	if n := testing.AllocsPerRun(1000, run); n != 0 {
		t.Errorf("Acquire+Release: %v allocations per run, want 0", n)
	}
}

// newLaneCapacity is a ModelCapacity over n fresh endpoints whose
// interactive lane is held.
func newLaneCapacity(tb testing.TB, n int) (*ModelCapacity, time.Time) {
	cfgs := make([]pools.EndpointConfig, n)
	for i := range cfgs {
		cfgs[i] = pools.EndpointConfig{URL: "http://127.0.0.1:" + strconv.Itoa(1000+i)}
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: cfgs}}, pools.Options{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	for i, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{Running: i % 7, Waiting: i % 3, MaxNumSeqs: 256, BlockSize: 16, NumGPUBlocks: 20000, ScrapedAt: now.Add(time.Hour)})
	}
	mc := NewModelCapacity(reg, "m", Lane{Endpoints: 1, MinFleet: 4, Hold: time.Minute})
	mc.noteInteractive(now)
	return mc, now
}

// BenchmarkModelCapacityMeasure is the measurement every Acquire and
// Release makes: 64 endpoints, room for both classes of bands, the lane
// held.
func BenchmarkModelCapacityMeasure(b *testing.B) {
	mc, now := newLaneCapacity(b, 64)
	var fc FlowControl
	fc.EnsureDefaults()
	b.ReportAllocs()
	for b.Loop() {
		if m := mc.Measure(now, &fc); m.Lower.Open >= m.Endpoints {
			b.Fatal("the lane is not left out")
		}
	}
}

func TestModelCapacityMeasureDoesNotAllocate(t *testing.T) {
	mc, now := newLaneCapacity(t, 64)
	var fc FlowControl
	fc.EnsureDefaults()
	if allocs := testing.AllocsPerRun(100, func() { mc.Measure(now, &fc) }); allocs != 0 {
		t.Errorf("Measure: %v allocs, want 0", allocs)
	}
}
