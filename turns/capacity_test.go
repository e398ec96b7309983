package turns

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/pools"
)

type fakeEndpoint struct {
	available, stale bool
	lent             bool // on a lent pool: Background only
	prioritizes      bool // its engine schedules by priority
	load             pools.Load
	inFlight         int64
	inFlightTokens   int64
}

func (e *fakeEndpoint) Available() bool       { return e.available }
func (e *fakeEndpoint) Stale(time.Time) bool  { return e.stale }
func (e *fakeEndpoint) Load() pools.Load      { return e.load }
func (e *fakeEndpoint) InFlight() int64       { return e.inFlight }
func (e *fakeEndpoint) InFlightTokens() int64 { return e.inFlightTokens }
func (e *fakeEndpoint) EngineQueue(time.Time) int64 {
	return int64(e.load.Waiting) + max(e.inFlight-int64(e.load.Running+e.load.Waiting), 0)
}

func (e *fakeEndpoint) Waiting(time.Time) int64 { return int64(e.load.Waiting) }
func (e *fakeEndpoint) BackgroundOnly() bool    { return e.lent }
func (e *fakeEndpoint) Prioritizes() bool       { return e.prioritizes }

var _ endpointLoad = (*fakeEndpoint)(nil)

func TestMeasure(t *testing.T) {
	var cfg FlowControl
	cfg.EnsureDefaults() // queue depth 5, KV 0.8, 131072 tokens, 64 slots, 4 reserved
	now := time.Now()
	idle := func() *fakeEndpoint { return &fakeEndpoint{available: true} }
	for _, tc := range []struct {
		name string
		eps  []*fakeEndpoint
		want Measurement
	}{
		{"no endpoints", nil, Measurement{Saturation: 1}},
		{"none available", []*fakeEndpoint{{available: false}}, Measurement{Saturation: 1}},
		{"idle", []*fakeEndpoint{idle(), idle()}, Measurement{Saturation: 0, Endpoints: 2, Slots: 128, Reserved: 8}},
		{"queue depth", []*fakeEndpoint{{available: true, load: pools.Load{Waiting: 2}}}, Measurement{Saturation: 0.4, Endpoints: 1, Slots: 64, Reserved: 4}},
		{"kv is the largest ratio", []*fakeEndpoint{{available: true, load: pools.Load{Waiting: 1, KVUsage: 0.6}}}, Measurement{Saturation: 0.75, Endpoints: 1, Slots: 64, Reserved: 4}},
		{"in-flight tokens", []*fakeEndpoint{{available: true, inFlightTokens: 65536}}, Measurement{Saturation: 0.5, Endpoints: 1, Slots: 64, Reserved: 4}},
		{"capped at 1", []*fakeEndpoint{{available: true, load: pools.Load{Waiting: 50}}}, Measurement{Saturation: 1, Endpoints: 1, Slots: 64, Reserved: 4}},
		{"stale is saturated", []*fakeEndpoint{{available: true, stale: true}, idle()}, Measurement{Saturation: 0.5, Endpoints: 2, Slots: 128, Reserved: 8}},
		{"unavailable endpoints are left out", []*fakeEndpoint{{available: false, stale: true}, idle()}, Measurement{Saturation: 0, Endpoints: 1, Slots: 64, Reserved: 4}},
		// A vLLM engine with a few long prompts reports most of its KV cache
		// in use and still admits more: usage counts only while it queues.
		{"kv usage without a queue is room", []*fakeEndpoint{{available: true, load: pools.Load{Running: 2, KVUsage: 0.95}}}, Measurement{Saturation: 2.0 / 64, Endpoints: 1, Slots: 64, Reserved: 4}},
		{"kv usage with a queue", []*fakeEndpoint{{available: true, load: pools.Load{Running: 2, Waiting: 1, KVUsage: 0.95}}}, Measurement{Saturation: 1, Endpoints: 1, Slots: 64, Reserved: 4}},
		// The engine runs 16 sequences at once: 16 + 5 queued slots, of
		// which 12 are taken by the gateway's requests.
		{"max_num_seqs calibrates slots", []*fakeEndpoint{{available: true, inFlight: 12, load: pools.Load{MaxNumSeqs: 16, Running: 12}}}, Measurement{Saturation: 12.0 / 21, Endpoints: 1, Slots: 21, Reserved: 4}},
		{"engine's own count when higher", []*fakeEndpoint{{available: true, inFlight: 1, load: pools.Load{MaxNumSeqs: 16, Running: 16, Waiting: 4}}}, Measurement{Saturation: 20.0 / 21, Endpoints: 1, Slots: 21, Reserved: 4}},
		// Requests waiting behind a step's prefill token budget while the
		// engine has sequences free and KV room are admitted within a step
		// or two: only those past its free sequences queue. 8 running of
		// 16 and 6 waiting: none queues, 14 of 21 slots taken; with 10
		// waiting, 2 queue (2 of 5).
		{"waiting within free sequences is room", []*fakeEndpoint{{available: true, load: pools.Load{MaxNumSeqs: 16, Running: 8, Waiting: 6, KVUsage: 0.5}}}, Measurement{Saturation: 14.0 / 21, Endpoints: 1, Slots: 21, Reserved: 4}},
		{"waiting past free sequences queues", []*fakeEndpoint{{available: true, load: pools.Load{MaxNumSeqs: 16, Running: 8, Waiting: 10, KVUsage: 0.5}}}, Measurement{Saturation: 18.0 / 21, Endpoints: 1, Slots: 21, Reserved: 4}},
		// With its KV cache full, an engine admits nothing more: all that
		// waits queues.
		{"waiting with the KV cache full queues", []*fakeEndpoint{{available: true, load: pools.Load{MaxNumSeqs: 16, Running: 8, Waiting: 6, KVUsage: 0.9}}}, Measurement{Saturation: 1, Endpoints: 1, Slots: 21, Reserved: 4}},
		// Requests sent since the last scrape, beyond what the engine then
		// counted, join its queue: 3 waiting + 4 more = 7 of 5.
		{"sent since the scrape count as waiting", []*fakeEndpoint{{available: true, inFlight: 9, load: pools.Load{Running: 2, Waiting: 3}}}, Measurement{Saturation: 1, Endpoints: 1, Slots: 64, Reserved: 4}},
		// 1000 blocks of 16 tokens, twice that in flight saturates: 32000.
		{"kv size calibrates tokens", []*fakeEndpoint{{available: true, inFlightTokens: 24000, load: pools.Load{BlockSize: 16, NumGPUBlocks: 1000}}}, Measurement{Saturation: 0.75, Endpoints: 1, Slots: 64, Reserved: 4}},
		{"tiny engine keeps one shared slot", []*fakeEndpoint{{available: true, load: pools.Load{MaxNumSeqs: 1}}}, Measurement{Saturation: 0, Endpoints: 1, Slots: 6, Reserved: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := measure(tc.eps, now, &cfg, 0, true)
			if math.Abs(got.Saturation-tc.want.Saturation) > 1e-9 || got.Endpoints != tc.want.Endpoints || got.Slots != tc.want.Slots || got.Reserved != tc.want.Reserved {
				t.Fatalf("measure = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestMeasurePrioritized: a model's endpoints count as prioritized only
// when every available one that takes more than Background turns has an
// engine that schedules by priority; with none available they do not.
func TestMeasurePrioritized(t *testing.T) {
	var cfg FlowControl
	cfg.EnsureDefaults()
	prio := func() *fakeEndpoint { return &fakeEndpoint{available: true, prioritizes: true} }
	fcfs := func() *fakeEndpoint { return &fakeEndpoint{available: true} }
	for _, tc := range []struct {
		name string
		eps  []*fakeEndpoint
		want bool
	}{
		{"every endpoint prioritizes", []*fakeEndpoint{prio(), prio()}, true},
		{"one serves first come, first served", []*fakeEndpoint{prio(), fcfs()}, false},
		{"an unavailable first-come endpoint is left out", []*fakeEndpoint{prio(), {available: false}}, true},
		{"a lent first-come pool is left out", []*fakeEndpoint{prio(), {available: true, lent: true}}, true},
		{"none available", []*fakeEndpoint{{available: false, prioritizes: true}}, false},
		{"no endpoints", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := measure(tc.eps, time.Now(), &cfg, 0, true).Prioritized; got != tc.want {
				t.Fatalf("Prioritized %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMeasureWithoutReserve(t *testing.T) {
	cfg := FlowControl{InteractiveReservedPerEndpoint: -1}
	cfg.EnsureDefaults()
	eps := []*fakeEndpoint{{available: true}, {available: true}}
	if got := measure(eps, time.Now(), &cfg, 0, true); got.Slots != 128 || got.Reserved != 0 {
		t.Fatalf("measure = %+v, want 128 slots and none reserved", got)
	}
}

// TestEndpointSaturationReadsPools reads a real *pools.Endpoint's load view.
func TestEndpointSaturationReadsPools(t *testing.T) {
	var cfg FlowControl
	cfg.EnsureDefaults()
	now := time.Now()
	e := &pools.Endpoint{ID: "e"}
	if s := endpointSaturation(e, now, &cfg); s != 1 {
		t.Fatalf("never scraped: saturation %g, want 1", s)
	}
	e.SetLoad(pools.Load{Waiting: 1, KVUsage: 0.4, ScrapedAt: now})
	if s := endpointSaturation(e, now, &cfg); math.Abs(s-0.5) > 1e-9 {
		t.Fatalf("saturation %g, want 0.5", s)
	}
}

// TestModelCapacitySpansPools: a model served by two pools is admitted
// against both, as the router dispatches to both.
func TestModelCapacitySpansPools(t *testing.T) {
	reg, err := pools.NewRegistry([]pools.PoolConfig{
		{Name: "gpu", ServedModels: []string{"m"}, Endpoints: []pools.EndpointConfig{{URL: "http://127.0.0.1:1"}}},
		{Name: "tpu", ServedModels: []string{"m", "other"}, Endpoints: []pools.EndpointConfig{{URL: "http://127.0.0.1:2"}, {URL: "http://127.0.0.1:3"}}},
	}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fc FlowControl
	fc.EnsureDefaults()
	now := time.Now()
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{ScrapedAt: now})
	}
	mc := NewModelCapacity(reg, "m", Lane{})
	if got := mc.Measure(now, &fc); got.Endpoints != 3 || got.Slots != 3*fc.MaxInFlightPerEndpoint {
		t.Fatalf("model m: %+v, want 3 endpoints across both pools", got)
	}
	reg.Endpoints()[0].SetHealthy(false)
	if got := mc.Measure(now, &fc); got.Endpoints != 2 || got.Saturation == 1 {
		t.Fatalf("with the gpu pool down: %+v, want the tpu pool's 2 endpoints to admit", got)
	}
	if mc.Name() != "model:m" {
		t.Errorf("name %q", mc.Name())
	}
}

// TestMeasureOpenAndRoom: the endpoints that are not saturated are open,
// and their token room is what one dispatch pass may grant.
func TestMeasureOpenAndRoom(t *testing.T) {
	var cfg FlowControl
	cfg.EnsureDefaults()
	kv := pools.Load{BlockSize: 16, NumGPUBlocks: 1000} // saturated at 32000 tokens
	hot := &fakeEndpoint{available: true, inFlightTokens: 40000, load: kv}
	warm := &fakeEndpoint{available: true, inFlightTokens: 30000, load: kv}
	cold := &fakeEndpoint{available: true, load: kv}
	got := measure([]*fakeEndpoint{hot, warm, cold}, time.Now(), &cfg, 0, true)
	if got.Open != 2 || got.Room != 2000+32000 {
		t.Fatalf("measure = %+v, want 2 open endpoints with 34000 tokens of room", got)
	}
	got = measure([]*fakeEndpoint{hot}, time.Now(), &cfg, 0, true)
	if got.Open != 0 || got.Room != 0 || got.Saturation != 1 {
		t.Fatalf("measure = %+v, want a saturated pool", got)
	}
}

// TestMeasureLowerBands: the lower bands see each endpoint's capacity less
// the room it keeps for Interactive turns — sequences, tokens and a
// shorter engine queue — so an endpoint can have room for an Interactive
// turn and none for a Standard one, never the other way round.
func TestMeasureLowerBands(t *testing.T) {
	var cfg FlowControl
	cfg.EnsureDefaults()                                                // 4 sequences, 16384 tokens, queue of 2 kept back
	kv := pools.Load{BlockSize: 16, NumGPUBlocks: 4096, MaxNumSeqs: 16} // 131072 tokens; 21 slots, 17 for lower bands
	for _, tc := range []struct {
		name      string
		e         fakeEndpoint
		all, low  bool
		lowerRoom int64
	}{
		{"idle", fakeEndpoint{load: kv}, true, true, 131072 - 16384},
		{"sequences in the reserve", fakeEndpoint{inFlight: 17, load: withRunning(kv, 17)}, true, false, 131072 - 16384},
		{"tokens in the reserve", fakeEndpoint{inFlightTokens: 120000, load: kv}, true, false, 0},
		{"an engine queue of two", fakeEndpoint{load: withWaiting(kv, 2)}, true, false, 131072 - 16384},
		{"an engine queue of one", fakeEndpoint{load: withWaiting(kv, 1)}, true, true, 131072 - 16384},
		// Three sent since the last scrape: the whole queue bound counts
		// them (3 of 5), the lower bands' the engine's own count (none).
		{"sent since the scrape", fakeEndpoint{inFlight: 3, load: kv}, true, true, 131072 - 16384},
		// With every sequence running (an engine with sequences free
		// admits what waits: TestMeasure), five more past the scrape reach
		// the whole queue bound, as five waiting do.
		{"sent since the scrape past the whole bound", fakeEndpoint{inFlight: 21, load: withRunning(kv, 16)}, false, false, 0},
		{"saturated for all", fakeEndpoint{load: withWaiting(withRunning(kv, 16), 5)}, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.e
			e.available = true
			m := measure([]*fakeEndpoint{&e}, time.Now(), &cfg, 0, true)
			if (m.Open == 1) != tc.all || (m.Lower.Open == 1) != tc.low {
				t.Fatalf("open %d, lower open %d; want room for all %v, for the lower bands %v", m.Open, m.Lower.Open, tc.all, tc.low)
			}
			if tc.low && m.Lower.Room != tc.lowerRoom {
				t.Errorf("lower room %d, want %d", m.Lower.Room, tc.lowerRoom)
			}
			if m.Lower.Saturation < m.Saturation {
				t.Errorf("lower saturation %g below the pool's %g", m.Lower.Saturation, m.Saturation)
			}
		})
	}
}

func withRunning(l pools.Load, n int) pools.Load { l.Running = n; return l }
func withWaiting(l pools.Load, n int) pools.Load { l.Waiting = n; return l }

// TestModelCapacityLane: while Interactive turns keep coming, the routing
// policy's interactive lane takes only them, so admission counts no room
// there for the lower bands; the lane lapses after Hold without one, and a
// fleet below MinFleet has none.
func TestModelCapacityLane(t *testing.T) {
	now := time.Now()
	reg := freshRegistry(t, 4, pools.Load{ScrapedAt: now.Add(time.Hour)}) // fresh throughout
	var fc FlowControl
	fc.EnsureDefaults()
	mc := NewModelCapacity(reg, "m", Lane{Endpoints: 1, MinFleet: 4, Hold: 30 * time.Second})
	c, _ := newTestController(t, Config{})
	open := func(at time.Time) (all, lower int) {
		m := mc.Measure(at, &fc)
		return m.Open, m.Lower.Open
	}
	if all, lower := open(now); all != 4 || lower != 4 {
		t.Fatalf("before any interactive turn: open %d, lower %d; want 4 and 4", all, lower)
	}
	// A Standard turn does not hold the lane; an Interactive one does.
	for _, b := range []Band{Standard, Interactive} {
		tk, err := c.Acquire(context.Background(), &Turn{Tenant: "a", Band: b}, mc)
		if err != nil {
			t.Fatal(err)
		}
		tk.Release(0)
	}
	at := time.Unix(0, mc.lastInteractive.Load())
	if all, lower := open(at.Add(time.Second)); all != 4 || lower != 3 {
		t.Errorf("lane held: open %d, lower %d; want 4 and 3", all, lower)
	}
	if all, lower := open(at.Add(31 * time.Second)); all != 4 || lower != 4 {
		t.Errorf("lane lapsed: open %d, lower %d; want 4 and 4", all, lower)
	}
	reg.Endpoints()[3].SetHealthy(false)
	if all, lower := open(at.Add(time.Second)); all != 3 || lower != 3 {
		t.Errorf("three endpoints, below the lane's fleet: open %d, lower %d; want 3 and 3", all, lower)
	}
}

// The reserves for Interactive turns are kept only while Interactive turns
// come: a model with none for InteractiveReserveHold gives the lower bands
// every endpoint's whole room.
func TestInteractiveReserveHold(t *testing.T) {
	now := time.Now()
	// 62 of 64 slots taken by the engine's own count: inside the
	// Interactive reserve of 4, outside the whole room.
	reg := freshRegistry(t, 2, pools.Load{ScrapedAt: now.Add(time.Hour), Running: 62})
	var fc FlowControl
	fc.EnsureDefaults()
	mc := NewModelCapacity(reg, "m", Lane{})
	lowerOpen := func(at time.Time, cfg *FlowControl) (int, int) {
		m := mc.Measure(at, cfg)
		return m.Lower.Open, m.Reserved
	}
	if open, kept := lowerOpen(now, &fc); open != 2 || kept != 0 {
		t.Fatalf("before any Interactive turn: lower bands open on %d endpoints, %d slots kept; want 2 and 0", open, kept)
	}
	c, _ := newTestController(t, Config{})
	tk, err := c.Acquire(context.Background(), &Turn{Tenant: "a", Band: Interactive}, mc)
	if err != nil {
		t.Fatal(err)
	}
	tk.Release(0)
	at := time.Unix(0, mc.lastInteractive.Load())
	if open, kept := lowerOpen(at.Add(time.Minute), &fc); open != 0 || kept != 8 {
		t.Errorf("a minute after an Interactive turn: lower bands open on %d endpoints, %d slots kept; want 0 and 8", open, kept)
	}
	if open, kept := lowerOpen(at.Add(fc.InteractiveReserveHold+time.Second), &fc); open != 2 || kept != 0 {
		t.Errorf("past the hold: lower bands open on %d endpoints, %d slots kept; want 2 and 0", open, kept)
	}
	always := fc
	always.InteractiveReserveHold = -1
	if open, kept := lowerOpen(at.Add(time.Hour), &always); open != 0 || kept != 8 {
		t.Errorf("hold negative: lower bands open on %d endpoints, %d slots kept; want 0 and 8", open, kept)
	}
}

// freshRegistry is a pool of n endpoints serving model "m", each with load l.
func freshRegistry(t *testing.T, n int, l pools.Load) *pools.Registry {
	t.Helper()
	var eps []pools.EndpointConfig
	for i := range n {
		eps = append(eps, pools.EndpointConfig{URL: fmt.Sprintf("http://127.0.0.1:%d", i+1)})
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: eps}}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(l)
	}
	return reg
}

// TestMeasureBacklog: the pool's Backlog is its best engine's queue in
// holds of one of its sequences, counting the turn itself; Seqs sums the
// engines' sequences.
func TestMeasureBacklog(t *testing.T) {
	var cfg FlowControl
	cfg.EnsureDefaults() // queue depth 5, KV 0.8, 131072 tokens, 64 slots
	now := time.Now()
	seqs := func(running, waiting int, kv float64) *fakeEndpoint {
		return &fakeEndpoint{available: true, load: pools.Load{MaxNumSeqs: 16, Running: running, Waiting: waiting, KVUsage: kv}}
	}
	for _, tc := range []struct {
		name    string
		eps     []*fakeEndpoint
		backlog float64
		seqs    int
	}{
		{"no endpoints", nil, 0, 0},
		{"a free sequence", []*fakeEndpoint{seqs(15, 0, 0.5)}, 0, 16},
		// Waiting behind the step's prefill budget within free sequences:
		// a sequence is still free for one more.
		{"waiting within free sequences", []*fakeEndpoint{seqs(8, 6, 0.5)}, 0, 16},
		// All 16 running: the turn takes the first sequence to end.
		{"every sequence running", []*fakeEndpoint{seqs(16, 0, 0.5)}, 1.0 / 16, 16},
		// 8 free, 10 waiting: 2 ahead past the free ones, and the turn.
		{"waiting past free sequences", []*fakeEndpoint{seqs(8, 10, 0.5)}, 3.0 / 16, 16},
		// KV full: the free sequences are no room, all 6 waiting are ahead.
		{"kv full", []*fakeEndpoint{seqs(8, 6, 0.9)}, 7.0 / 16, 16},
		{"the best engine", []*fakeEndpoint{seqs(16, 31, 0.5), seqs(16, 3, 0.5)}, 4.0 / 16, 32},
		// A stale engine is known only by what the gateway sent it.
		{"stale", []*fakeEndpoint{{available: true, stale: true, inFlight: 7, load: pools.Load{MaxNumSeqs: 16}}}, 8.0 / 16, 16},
		// No max_num_seqs reported: its slots stand for its sequences.
		{"no limits reported", []*fakeEndpoint{{available: true, load: pools.Load{Running: 3, Waiting: 1}}}, 2.0 / 64, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := measure(tc.eps, now, &cfg, 0, true)
			if math.Abs(got.Backlog-tc.backlog) > 1e-9 || got.Seqs != tc.seqs {
				t.Fatalf("backlog %g, seqs %d; want %g, %d", got.Backlog, got.Seqs, tc.backlog, tc.seqs)
			}
		})
	}
}
