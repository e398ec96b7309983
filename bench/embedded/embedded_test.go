package embedded

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/bench"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/stack"
)

// The tests' simulated fleet: an 8B model on H100s, in real time.
const (
	testAccelerator = "h100"
	testModel       = "llama-3.1-8b"
	testServedModel = "meta-llama/Llama-3.1-8B-Instruct"
)

// testFleet is an aggregated fleet of replicas of the tests' engines,
// routed by cache-aware.
func testFleet(replicas int) *Fleet {
	cfg := sim.Config{Accelerator: testAccelerator, Model: testModel, ServedModelName: testServedModel, Flavor: sim.FlavorVLLM, TimeScale: 1, KVEventsAddr: "tcp://127.0.0.1:0"}
	return &Fleet{
		New: func(topology string) (*sim.Topology, error) {
			return sim.NewTopology(topology, cfg, replicas, 0)
		},
		Policy: "cache-aware", Sim: cfg, Replicas: replicas,
	}
}

// kvEventsConnected is the gateway's turnpike_kv_event_connected of
// endpoint, from its /metrics at url; 0 when absent.
func kvEventsConnected(t *testing.T, url, endpoint string) float64 {
	t.Helper()
	fams, err := scrape.Families(t.Context(), http.DefaultClient, url)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fams["turnpike_kv_event_connected"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "endpoint" && l.GetValue() == endpoint {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func TestGatewaysOf(t *testing.T) {
	for _, tc := range []struct {
		entry, rest string
		def, n      int
		named       bool
		err         string
	}{
		{entry: "cache-aware", def: 1, rest: "cache-aware", n: 1},
		{entry: "cache-aware", def: 3, rest: "cache-aware", n: 3},
		{entry: "cache-aware@2gw", def: 1, rest: "cache-aware", n: 2, named: true},
		{entry: "cache-aware@1gw", def: 2, rest: "cache-aware", n: 1, named: true},
		{entry: "cache-aware@pd@2gw", def: 1, rest: "cache-aware@pd", n: 2, named: true},
		{entry: "2gw", def: 1, rest: "", n: 2, named: true},
		{entry: "cache-aware@pd", def: 1, rest: "cache-aware@pd", n: 1},
		{entry: "cache-aware@0gw", err: `"0gw" is not a gateway count`},
		{entry: "cache-aware@xgw", err: `"xgw" is not a gateway count`},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			rest, n, named, err := gatewaysOf(tc.entry, tc.def)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || rest != tc.rest || n != tc.n || named != tc.named {
				t.Fatalf("got %q %d %v %v, want %q %d %v", rest, n, named, err, tc.rest, tc.n, tc.named)
			}
		})
	}
}

// TestEntries: a --compare entry names a policy, a topology, both, and
// the KV index's mode.
func TestEntries(t *testing.T) {
	f := &Fleet{Policy: "cache-aware", Topology: sim.TopologyAggregated}
	for _, tc := range []struct{ entry, rest, mode, policy, topology string }{
		{"cache-aware@approximate", "cache-aware", indexApproximate, "cache-aware", sim.TopologyAggregated},
		{"cache-aware@precise", "cache-aware", indexPrecise, "cache-aware", sim.TopologyAggregated},
		{"approximate", "cache-aware", indexApproximate, "cache-aware", sim.TopologyAggregated},
		{"session-hash@hbm+approximate", "session-hash@hbm", indexApproximate, "session-hash", sim.TopologyHBM},
		{"cpu-tier", "cpu-tier", indexPrecise, "cache-aware", sim.TopologyCPUTier},
		{"round-robin", "round-robin", indexPrecise, "round-robin", sim.TopologyAggregated},
		{"cost-aware@mixed", "cost-aware@mixed", indexPrecise, "cost-aware", sim.TopologyMixed},
		{"mixed", "mixed", indexPrecise, "cache-aware", sim.TopologyMixed},
	} {
		rest, mode := f.indexMode(tc.entry)
		policy, topology := f.entry(rest)
		if rest != tc.rest || mode != tc.mode || policy != tc.policy || topology != tc.topology {
			t.Errorf("%s: %q %s → %s on %s, want %q %s → %s on %s", tc.entry, rest, mode, policy, topology, tc.rest, tc.mode, tc.policy, tc.topology)
		}
	}
}

// TestApproximateStack: a cache-aware@approximate entry starts
// engines that publish no KV events, so the gateway subscribes to none;
// cache-aware@precise engines publish them.
func TestApproximateStack(t *testing.T) {
	f := testFleet(1)
	var bc bench.Config
	bc.EnsureDefaults()
	for entry, events := range map[string]bool{"cache-aware@approximate": false, "cache-aware@precise": true} {
		tg, stop, err := f.Start(t.Context(), entry, &Gateways{Count: 1}, bc, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		addr := tg.Replicas.(*sim.Fleets).Engines()[0].KVEventsAddr()
		connected := kvEventsConnected(t, tg.BaseURL+"/metrics", strings.TrimPrefix(tg.EngineURLs[0], "http://"))
		stop()
		if (addr != "") != events {
			t.Errorf("%s: engine publishes KV events at %q, want events %t", entry, addr, events)
		}
		if !events && connected != 0 {
			t.Errorf("%s: the gateway is subscribed to KV events", entry)
		}
		if len(tg.EngineURLs) != 1 {
			t.Errorf("%s: target engine URLs %q, want the one replica's", entry, tg.EngineURLs)
		}
	}
}

// TestCost prices the mixed fleet from the catalog, its engines
// numbered in pool order, its clock the simulator's.
func TestCost(t *testing.T) {
	ps := []pools.PoolConfig{
		{Name: "gpu", Accelerator: "h200", Model: "llama-3.1-8b", Endpoints: make([]pools.EndpointConfig, 2)},
		{Name: "tpu", Accelerator: "tpu-v6e", Model: "llama-3.1-8b", Endpoints: make([]pools.EndpointConfig, 1)},
	}
	c := cost(ps, 0.1, 2*time.Second)
	if c.ClockScale != 10 || c.TTFTTarget.D() != 200*time.Millisecond || len(c.Pools) != 2 {
		t.Fatalf("setup %+v", c)
	}
	g, p := c.Pools[0], c.Pools[1]
	if g.DollarsPerHour != 5 || p.DollarsPerHour != 2.7 || len(g.Engines) != 2 || g.Engines[1] != 1 || p.Engines[0] != 2 {
		t.Errorf("pools %+v %+v", g, p)
	}
	if !(g.PrefillSecondsPerToken > 0 && p.PrefillSecondsPerToken > g.PrefillSecondsPerToken) {
		t.Errorf("prefill seconds per token: h200 %g, tpu-v6e %g", g.PrefillSecondsPerToken, p.PrefillSecondsPerToken)
	}
	cfg := &stack.Config{}
	ttftTargets(cfg, 0.1, 2*time.Second)
	if cfg.Routing.Cost.TTFTTargets[affinity.BandInteractive] != 200*time.Millisecond {
		t.Errorf("targets %v", cfg.Routing.Cost.TTFTTargets)
	}
}

// The embedded gateway scrapes a time-scaled fleet on the fleet's clock:
// 200 ms of modelled time, at least 10 ms of wall time, unless the config
// says otherwise; a fleet in real time keeps the default. Its health
// probes go on the same clock: 2 s of modelled time, at least 100 ms.
func TestScrapes(t *testing.T) {
	for _, c := range []struct {
		scale                 float64
		set, want             time.Duration
		setHealth, wantHealth time.Duration
	}{
		{0.1, 0, 20 * time.Millisecond, 0, 200 * time.Millisecond},
		{0.01, 0, minScrape, 0, minHealth},
		{5, 0, time.Second, 0, 10 * time.Second},
		{1, 0, 0, 0, 0},
		{0, 0, 0, 0, 0},
		{0.1, 500 * time.Millisecond, 500 * time.Millisecond, 5 * time.Second, 5 * time.Second},
		// The config's defaults filled in first, as every embedded
		// gateway's are.
		{10, pools.DefaultScrapeInterval, 2 * time.Second, pools.DefaultHealthInterval, 20 * time.Second},
	} {
		cfg := &stack.Config{}
		cfg.Fleet.ScrapeInterval = c.set
		cfg.Fleet.HealthInterval = c.setHealth
		cfg.Fleet.EnsureDefaults()
		scrapes(cfg, c.scale)
		want, wantHealth := c.want, c.wantHealth
		if want == 0 {
			want = pools.DefaultScrapeInterval
		}
		if wantHealth == 0 {
			wantHealth = pools.DefaultHealthInterval
		}
		if got := cfg.Fleet.ScrapeInterval; got != want {
			t.Errorf("time scale %v, configured %v: scrape interval %v, want %v", c.scale, c.set, got, want)
		}
		if got := cfg.Fleet.HealthInterval; got != wantHealth {
			t.Errorf("time scale %v, configured %v: health interval %v, want %v", c.scale, c.setHealth, got, wantHealth)
		}
		// A load is stale after three intervals missed, not sooner.
		if stale := cfg.Fleet.StaleAfter; stale < 3*want {
			t.Errorf("time scale %v: stale after %v, sooner than three scrapes of %v", c.scale, stale, want)
		}
	}
}

// The embedded gateway's flush interval is on the fleet's clock, at most
// the most the gateway takes.
func TestFlushes(t *testing.T) {
	for _, c := range []struct {
		scale     float64
		set, want time.Duration
	}{
		{10, 20 * time.Millisecond, 200 * time.Millisecond},
		{0, 20 * time.Millisecond, 20 * time.Millisecond},
		{0.1, 20 * time.Millisecond, 2 * time.Millisecond},
		{100, 20 * time.Millisecond, dispatch.MaxFlushInterval},
		{5, 0, 0},
	} {
		cfg := &stack.Config{}
		flushes(cfg, c.scale, c.set)
		if got := cfg.Server.FlushInterval; got != c.want {
			t.Errorf("time scale %v, %v: flush interval %v, want %v", c.scale, c.set, got, c.want)
		}
	}
}
