package turns

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/turnpike-gateway/turnpike/pools"
	"go.yaml.in/yaml/v3"
)

// controllerHarness drives a Controller from a datadriven file: a fake
// clock, fake pools, and one goroutine per acquired turn.
type controllerHarness struct {
	t       *testing.T
	c       *Controller
	clock   *fakeClock
	pools   map[string]*fakeCapacity
	fleets  map[string]*fleetCapacity
	pending map[string]*pendingTurn
	tickets map[string]Ticket
	// returned are turns known to have returned, not yet reported.
	returned []*pendingTurn
}

type pendingTurn struct {
	cancel context.CancelFunc
	done   chan acquireResult
}

type acquireResult struct {
	id  string
	tk  Ticket
	err error
}

func TestControllerDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/controller", func(t *testing.T, path string) {
		h := &controllerHarness{t: t, clock: newFakeClock(), pools: map[string]*fakeCapacity{}, fleets: map[string]*fleetCapacity{}, pending: map[string]*pendingTurn{}, tickets: map[string]Ticket{}}
		defer h.close()
		datadriven.RunTest(t, path, h.run)
	})
}

func (h *controllerHarness) close() {
	if h.c != nil {
		h.c.Close(context.Background())
	}
	for _, p := range h.pending {
		p.cancel()
	}
}

func (h *controllerHarness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "new":
		var cfg Config
		if err := yaml.Unmarshal([]byte(d.Input), &cfg); err != nil {
			d.Fatalf(t, "yaml: %v", err)
		}
		random := rand.New(rand.NewPCG(1, 2)).Float64
		if d.HasArg("shed-always") {
			random = func() float64 { return 0 }
		}
		c, err := New(cfg, WithClock(h.clock.Now), WithRandom(random), WithRegisterer(prometheus.NewRegistry()), withoutTicker())
		if err != nil {
			return err.Error()
		}
		c.Start(context.Background())
		h.c = c
		return "ok"
	case "set-tenants":
		var ts []Tenant
		if err := yaml.Unmarshal([]byte(d.Input), &ts); err != nil {
			d.Fatalf(t, "yaml: %v", err)
		}
		if err := h.c.SetTenants(ts); err != nil {
			return err.Error()
		}
		return "ok"
	case "pool":
		var name string
		endpoints, slots, reserved, sat := 1, 1, 0, 0.0
		d.ScanArgs(t, "name", &name)
		d.MaybeScanArgs(t, "endpoints", &endpoints)
		d.MaybeScanArgs(t, "slots", &slots)
		d.MaybeScanArgs(t, "reserved", &reserved)
		d.MaybeScanArgs(t, "sat", &sat)
		m := Measurement{Endpoints: endpoints, Slots: slots, Reserved: reserved, Saturation: sat, Prioritized: d.HasArg("prioritized")}
		// The fleet's pace: its engines' sequences, the best engine's
		// queue in holds, the requests sent.
		d.MaybeScanArgs(t, "seqs", &m.Seqs)
		d.MaybeScanArgs(t, "backlog", &m.Backlog)
		d.MaybeScanArgs(t, "inflight", &m.InFlight)
		if p := h.pools[name]; p == nil {
			h.pools[name] = newFakeCapacity(name, endpoints, slots, sat)
		}
		h.pools[name].set(m)
		return ""
	case "fleet":
		// A pool measured as the gateway measures one, over fake endpoints
		// whose load the test sets with "endpoint".
		var name string
		n := 1
		d.ScanArgs(t, "name", &name)
		d.MaybeScanArgs(t, "endpoints", &n)
		f := &fleetCapacity{name: name, now: h.clock.Now}
		for range n {
			f.eps = append(f.eps, &fakeEndpoint{available: true, load: pools.Load{ScrapedAt: h.clock.Now()}})
		}
		h.fleets[name] = f
		return ""
	case "endpoint":
		return h.endpoint(t, d)
	case "acquire":
		return h.acquire(t, d)
	case "release":
		var id string
		tokens := -1
		d.ScanArgs(t, "id", &id)
		d.MaybeScanArgs(t, "tokens", &tokens)
		tk, ok := h.tickets[id]
		if !ok {
			d.Fatalf(t, "no ticket %s", id)
		}
		delete(h.tickets, id)
		tk.Release(tokens)
		return h.settle(t)
	case "cancel":
		var id string
		d.ScanArgs(t, "id", &id)
		p := h.pending[id]
		p.cancel()
		select {
		case r := <-p.done:
			delete(h.pending, id)
			p.done <- r // for settle to report
			h.returned = append(h.returned, p)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Acquire did not return after cancel", id)
		}
		return h.settle(t)
	case "advance":
		var by time.Duration
		var s string
		d.ScanArgs(t, "by", &s)
		by, err := time.ParseDuration(s)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		h.clock.Advance(by)
		h.c.tick()
		return h.settle(t)
	case "drain":
		// Release tickets oldest first until nothing is left, reporting
		// what each release lets through.
		var sb strings.Builder
		for len(h.tickets) > 0 {
			oldest := ""
			for id, tk := range h.tickets {
				if oldest == "" || tk.w.dispatchSeq < h.tickets[oldest].w.dispatchSeq {
					oldest = id
				}
			}
			tk := h.tickets[oldest]
			delete(h.tickets, oldest)
			tk.Release(-1)
			sb.WriteString(h.settle(t))
		}
		return sb.String()
	case "queues":
		return h.queues(d.HasArg("hold"))
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

func (h *controllerHarness) acquire(t *testing.T, d *datadriven.TestData) string {
	var id, tenant, pool, bandName, session, gap string
	tokens, cached, out, turns := 100, 0, 0, 0
	pool = "p"
	d.ScanArgs(t, "id", &id)
	d.ScanArgs(t, "tenant", &tenant)
	d.MaybeScanArgs(t, "pool", &pool)
	d.MaybeScanArgs(t, "band", &bandName)
	d.MaybeScanArgs(t, "tokens", &tokens)
	d.MaybeScanArgs(t, "cached", &cached)
	d.MaybeScanArgs(t, "out", &out)
	d.MaybeScanArgs(t, "session", &session)
	d.MaybeScanArgs(t, "turns", &turns)
	d.MaybeScanArgs(t, "gap", &gap)
	turn := &Turn{Tenant: tenant, SessionKey: session, InputTokens: tokens, CachedTokens: cached, ExpectedOutputTokens: out, SessionTurns: turns, Warm: d.HasArg("warm")}
	if bandName != "" {
		b, err := ParseBand(bandName)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		turn.Band = b
	}
	if gap != "" {
		g, err := time.ParseDuration(gap)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		turn.MeanGap = g
	}
	var capacity Capacity
	if f := h.fleets[pool]; f != nil {
		capacity = f
	} else if p := h.pools[pool]; p != nil {
		capacity = p
	} else {
		d.Fatalf(t, "no pool %s", pool)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &pendingTurn{cancel: cancel, done: make(chan acquireResult, 1)}
	h.pending[id] = p
	go func() {
		tk, err := h.c.Acquire(ctx, turn, capacity)
		p.done <- acquireResult{id: id, tk: tk, err: err}
	}()
	return h.settle(t)
}

// endpoint sets one fake endpoint's load and the gateway's in-flight
// counts on it, then lets the Controller re-measure as its ticker would,
// and reports what that dispatched, and the fleet's measurement.
func (h *controllerHarness) endpoint(t *testing.T, d *datadriven.TestData) string {
	var name string
	var i int
	d.ScanArgs(t, "fleet", &name)
	d.ScanArgs(t, "i", &i)
	f := h.fleets[name]
	if f == nil || i >= len(f.eps) {
		d.Fatalf(t, "no endpoint %s/%d", name, i)
	}
	f.mu.Lock()
	e := f.eps[i]
	l := &e.load
	d.MaybeScanArgs(t, "running", &l.Running)
	d.MaybeScanArgs(t, "waiting", &l.Waiting)
	d.MaybeScanArgs(t, "kv", &l.KVUsage)
	d.MaybeScanArgs(t, "seqs", &l.MaxNumSeqs)
	if d.HasArg("blocks") {
		d.ScanArgs(t, "blocks", &l.NumGPUBlocks)
		l.BlockSize = 16
	}
	d.MaybeScanArgs(t, "inflight", &e.inFlight)
	d.MaybeScanArgs(t, "tokens", &e.inFlightTokens)
	if d.HasArg("down") {
		e.available = false
	}
	if d.HasArg("up") {
		e.available = true
	}
	if d.HasArg("lent") {
		e.lent = true
	}
	l.ScrapedAt = h.clock.Now()
	f.mu.Unlock()
	h.c.tick()
	out := h.settle(t)
	var cfg FlowControl = h.c.Config()
	m := f.Measure(h.clock.Now(), &cfg)
	out += fmt.Sprintf("%s: open=%d/%d saturation=%.2f room=%d lower: open=%d saturation=%.2f room=%d slack=%d",
		name, m.Open, m.Endpoints, m.Saturation, m.Room, m.Lower.Open, m.Lower.Saturation, m.Lower.Room, m.Slack)
	if m.LentSlack > 0 || e.lent {
		out += fmt.Sprintf(" lent-slack=%d lent-slots=%d", m.LentSlack, m.LentSlots)
	}
	return out + "\n"
}

// fleetCapacity is a Capacity measured by measure over fake endpoints.
type fleetCapacity struct {
	name string
	now  func() time.Time
	mu   sync.Mutex
	eps  []*fakeEndpoint
}

func (f *fleetCapacity) Name() string { return f.name }

func (f *fleetCapacity) Measure(now time.Time, cfg *FlowControl) Measurement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return measure(f.eps, now, cfg, 0, true)
}

// settle waits until every pending Acquire has either returned or is
// queued, and reports those that returned: dispatches in dispatch order,
// then errors by id.
func (h *controllerHarness) settle(t *testing.T) string {
	var done []acquireResult
	for _, p := range h.returned {
		done = append(done, <-p.done)
	}
	h.returned = h.returned[:0]
	deadline := time.Now().Add(5 * time.Second)
	for {
		for id, p := range h.pending {
			select {
			case r := <-p.done:
				done = append(done, r)
				delete(h.pending, id)
			default:
			}
		}
		if h.c.Len() == len(h.pending) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("turns did not settle: %d pending, %d queued", len(h.pending), h.c.Len())
		}
		time.Sleep(50 * time.Microsecond)
	}
	sort.Slice(done, func(i, j int) bool {
		a, b := done[i], done[j]
		if (a.err == nil) != (b.err == nil) {
			return a.err == nil
		}
		if a.err == nil {
			return a.tk.w.dispatchSeq < b.tk.w.dispatchSeq
		}
		return a.id < b.id
	})
	var sb strings.Builder
	for _, r := range done {
		var se *ShedError
		switch {
		case r.err == nil:
			fmt.Fprintf(&sb, "%s: dispatched %s waited=%v\n", r.id, r.tk.Band(), r.tk.Waited())
			h.tickets[r.id] = r.tk
		case errors.As(r.err, &se):
			fmt.Fprintf(&sb, "%s: shed %d %s retry-after=%v\n", r.id, se.Status, se.Reason, se.RetryAfter)
		default:
			fmt.Fprintf(&sb, "%s: %v\n", r.id, r.err)
		}
	}
	if len(done) == 0 && len(h.pending) > 0 {
		ids := make([]string, 0, len(h.pending))
		for id := range h.pending {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		fmt.Fprintf(&sb, "queued: %s\n", strings.Join(ids, " "))
	}
	return sb.String()
}

// queues prints each pool's bands: count, tokens and credit; with hold,
// the pool's smoothed hold time too.
func (h *controllerHarness) queues(hold bool) string {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	names := make([]string, 0, len(h.c.mu.pools))
	for n := range h.c.mu.pools {
		names = append(names, n)
	}
	sort.Strings(names)
	var sb strings.Builder
	for _, n := range names {
		pq := h.c.mu.pools[n]
		fmt.Fprintf(&sb, "%s: dispatched=%d interactive=%d queued=%d", n, pq.dispatched, pq.interactive, pq.queued)
		if hold {
			fmt.Fprintf(&sb, " hold=%.3gs", pq.hold)
		}
		sb.WriteString("\n")
		for i := range pq.bands {
			bq := &pq.bands[i]
			if bq.count == 0 {
				continue
			}
			fmt.Fprintf(&sb, "  %s: %d turns, %d tokens\n", bq.band, bq.count, bq.tokens)
		}
	}
	ts := make([]string, 0, len(h.c.mu.tenants))
	for n := range h.c.mu.tenants {
		ts = append(ts, n)
	}
	sort.Strings(ts)
	for _, n := range ts {
		st := h.c.mu.tenants[n]
		fmt.Fprintf(&sb, "tenant %s: held=%d tokens=%d\n", n, st.held, st.heldTokens)
	}
	return sb.String()
}

func TestReleaseTwicePanics(t *testing.T) {
	c, _ := newTestController(t, Config{})
	tk, err := c.Acquire(context.Background(), &Turn{Tenant: "a"}, newFakeCapacity("p", 1, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	tk.Release(1)
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("second Release did not panic")
		}
	}()
	tk.Release(1)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, clock := newTestController(t, Config{FlowControl: FlowControl{Bands: BandsConfig{Interactive: BandConfig{TTL: time.Second}}}},
		WithRegisterer(reg), WithRandom(func() float64 { return 0 }))
	pool := newFakeCapacity("p", 1, 1, 0.9)
	ctx := context.Background()
	tk, err := c.Acquire(ctx, &Turn{Tenant: "a", Band: Interactive, InputTokens: 10}, pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, &Turn{Tenant: "a", Band: Background}, pool); err == nil {
		t.Fatal("background turn at saturation 0.9 was not shed")
	}
	done := make(chan error)
	go func() {
		_, err := c.Acquire(ctx, &Turn{Tenant: "b", Band: Interactive}, pool)
		done <- err
	}()
	for c.Len() == 0 {
		time.Sleep(time.Millisecond)
	}
	if got := metricValue(t, c.metrics.queued.WithLabelValues("interactive", "b")); got != 1 {
		t.Errorf("queued{interactive,b} = %g, want 1", got)
	}
	// Its endpoint gone, the queued turn waits out its TTL.
	pool.set(Measurement{Saturation: 1})
	clock.Advance(time.Second)
	c.tick()
	if err := <-done; !errors.Is(err, ErrShed) {
		t.Fatalf("queued turn: %v, want no-endpoints", err)
	}
	pool.set(Measurement{Endpoints: 1, Slots: 1, Saturation: 0.9})
	tk.Release(25)

	for _, tc := range []struct {
		c    prometheus.Metric
		want float64
	}{
		{c.metrics.admitted.WithLabelValues("interactive"), 1},
		{c.metrics.shed.WithLabelValues("background", ReasonSaturated), 1},
		{c.metrics.shed.WithLabelValues("interactive", ReasonNoEndpoints), 1},
		{c.metrics.queued.WithLabelValues("interactive", "b"), 0},
		{c.metrics.tokens.WithLabelValues("a"), 25},
		{c.metrics.saturation.WithLabelValues("p"), 0.9},
		{c.metrics.inFlight.WithLabelValues("p"), 0},
	} {
		if got := metricValue(t, tc.c); got != tc.want {
			t.Errorf("%v = %g, want %g", tc.c.Desc(), got, tc.want)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, f := range families {
		names[f.GetName()] = len(f.GetMetric())
	}
	for _, name := range []string{"turnpike_turns_queued", "turnpike_turns_wait_seconds", "turnpike_turns_admitted_total", "turnpike_turns_shed_total", "turnpike_turns_cancelled_total", "turnpike_turns_pool_saturation", "turnpike_turns_dispatched", "turnpike_turns_tenant_tokens_total"} {
		if names[name] == 0 {
			t.Errorf("%s not exported", name)
		}
	}
}

// metricValue reads a counter's or gauge's value.
func metricValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// TestTTLRule: a queued turn near its band's TTL is sent in time for the
// best engine to start it by then, shed as soon as that engine's queue
// alone is past the TTL, and, when it may not be sent, shed only when its
// TTL is spent.
func TestTTLRule(t *testing.T) {
	const tick, ttl = 50 * time.Millisecond, 10 * time.Second
	for _, tc := range []struct {
		name       string
		left, wait time.Duration
		sendable   bool
		want       ttlAction
	}{
		{"time to spare", 5 * time.Second, 0, true, ttlWait},
		{"two ticks of spare", 101 * time.Millisecond, 0, true, ttlWait},
		{"within two ticks", 100 * time.Millisecond, 0, true, ttlSend},
		{"the engine's wait fits", 4100 * time.Millisecond, 4 * time.Second, true, ttlSend},
		{"the engine's wait ahead of time", 4200 * time.Millisecond, 4 * time.Second, true, ttlWait},
		// Forecasts move between looks: a turn whose engine wait grew past
		// what is left, but not past its TTL, is still sent.
		{"the engine's wait grew past what is left", 4 * time.Second, 5 * time.Second, true, ttlSend},
		{"the engine's wait is the TTL", ttl, ttl, true, ttlSend},
		{"the engine's wait is past the TTL", ttl, ttl + 1, true, ttlShed},
		{"past the TTL early on", 9 * time.Second, 12 * time.Second, true, ttlShed},
		{"a late look sends", -time.Second, time.Second, true, ttlSend},
		{"not sendable: waits", time.Millisecond, time.Minute, false, ttlWait},
		{"not sendable: its TTL spent", 0, 0, false, ttlExpire},
	} {
		if got := ttlRule(tc.left, tc.wait, ttl, tick, tc.sendable); got != tc.want {
			t.Errorf("%s: ttlRule(%v, %v) = %d, want %d", tc.name, tc.left, tc.wait, got, tc.want)
		}
	}
}

// TestIdleTickerWakesForAQueuedTurn: a ticker that has found nothing
// queued waits for the next turn queued, not for its idle interval; the
// turn then goes out at the first tick that finds room, though no turn
// ends to let it through.
func TestIdleTickerWakesForAQueuedTurn(t *testing.T) {
	c, err := New(Config{FlowControl: FlowControl{TickInterval: time.Millisecond}}, WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	c.idleEvery = time.Hour
	c.Start(context.Background())
	t.Cleanup(func() { c.Close(context.Background()) })
	for idle := false; !idle; {
		c.mu.Lock()
		idle = c.mu.tickIdle
		c.mu.Unlock()
		runtime.Gosched()
	}

	full := newFakeCapacity("p", 1, 1, 1)
	got := make(chan error, 1)
	go func() {
		tk, err := c.Acquire(context.Background(), &Turn{Tenant: "a"}, full)
		if err == nil {
			tk.Release(1)
		}
		got <- err
	}()
	for queued := 0; queued == 0; runtime.Gosched() {
		queued = c.Len()
	}
	full.set(Measurement{Endpoints: 1, Slots: 1, Saturation: 0})
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the queued turn: %v, want it dispatched", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the queued turn was still waiting after a minute: the idle ticker did not wake for it")
	}
}
