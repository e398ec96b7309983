package affinity

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// newMixedFleet builds two pools serving model "m" with llama-3.1-8b: gpu
// of nGPU H200 endpoints and tpu of nTPU TPU v6e endpoints (engine
// vllm-tpu), in that order.
func newMixedFleet(t testing.TB, nGPU, nTPU int) *pools.Registry {
	t.Helper()
	eps := func(n, net int) []pools.EndpointConfig {
		var out []pools.EndpointConfig
		for i := range n {
			out = append(out, pools.EndpointConfig{URL: fmt.Sprintf("http://10.%d.0.%d:8000", net, i+1)})
		}
		return out
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{
		{Name: "gpu", Accelerator: "h200", Model: "llama-3.1-8b", ServedModels: []string{"m"}, Endpoints: eps(nGPU, 1)},
		{Name: "tpu", Engine: pools.EngineVLLMTPU, Accelerator: "tpu-v6e", Model: "llama-3.1-8b", ServedModels: []string{"m"}, Endpoints: eps(nTPU, 2)},
	}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// TestPrice runs the price scorer's specification in testdata/price.
//
//	fleet gpu=N tpu=N [policy=P] [target=D] [price=acc:$]  a mixed fleet and a fresh policy
//	prices prompt=R [output=N] [band=B]   each endpoint's rates, predicted TTFT, cost and score
//	pick prompt=R [output=N] [band=B]     route a request
//	done ttft=D elapsed=D prompt=N [cached=N] completion=N   the last pick's answer, elapsed on the clock
//	load ep=I [waiting=N] [running=N]     a fresh load report
//	record ep=I prompt=R                  the index learns the endpoint holds R
//	advance by=D                          move the clock
//	counters                              price decisions and routing decisions so far
func TestPrice(t *testing.T) {
	datadriven.Walk(t, "testdata/price", func(t *testing.T, path string) {
		clock := t0
		var (
			reg   *pools.Registry
			index *kv.Index
			prom  *prometheus.Registry
			pol   *CacheAware
			last  *Request
		)
		request := func(d *datadriven.TestData) *Request {
			var r string
			d.ScanArgs(t, "prompt", &r)
			req := &Request{Model: "m", Tenant: "t", Hashes: parseBlocks(t, r)}
			d.MaybeScanArgs(t, "output", &req.ExpectedOutputTokens)
			d.MaybeScanArgs(t, "band", &req.Band)
			return req
		}
		dur := func(d *datadriven.TestData, key string) time.Duration {
			var s string
			d.ScanArgs(t, key, &s)
			v, err := time.ParseDuration(s)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "fleet":
				var nGPU, nTPU int
				d.ScanArgs(t, "gpu", &nGPU)
				d.ScanArgs(t, "tpu", &nTPU)
				reg = newMixedFleet(t, nGPU, nTPU)
				index = kv.NewIndex(kv.IndexOptions{})
				prom = prometheus.NewRegistry()
				cfg := Config{Policy: PolicyCostAware}
				d.MaybeScanArgs(t, "policy", &cfg.Policy)
				if d.HasArg("target") {
					cfg.Cost.TTFTTargets = map[string]time.Duration{BandStandard: dur(d, "target")}
				}
				var price string
				if d.MaybeScanArgs(t, "price", &price) {
					acc, v, _ := strings.Cut(price, ":")
					var dollars float64
					fmt.Sscan(v, &dollars)
					cfg.Cost.Prices = map[string]float64{acc: dollars}
				}
				p, err := NewPolicy(cfg, Deps{Index: index, Metrics: prom, Rand: seqRand(1), Now: func() time.Time { return clock }})
				if err != nil {
					t.Fatal(err)
				}
				pol = p.(*CacheAware)
				for _, ep := range reg.Endpoints() {
					setLoad(ep, 0, 0, clock)
				}
				return ""
			case "prices":
				req := request(d)
				c := newCycle(req, reg.Endpoints(), clock)
				defer c.release()
				c.BlockSize = pol.blockSize
				pol.matchPrefix(c, reg.Endpoints(), false)
				scores := make([]float64, len(reg.Endpoints()))
				(&Price{TierWeights: pol.weights, Model: pol.price}).Score(c, reg.Endpoints(), scores)
				var sb strings.Builder
				fmt.Fprintf(&sb, "target %v\n", pol.price.target(req))
				for i, ep := range reg.Endpoints() {
					uncached := uncachedTokens(c, ep, &pol.weights)
					p := pol.model.Predict(ep, uncached, clock)
					cost := pol.price.Cost(ep, uncached, pol.price.output(req))
					fmt.Fprintf(&sb, "ep%d %s: %s; ttft=%v cost=$%.6f score=%.2f\n", ep.Index, ep.Pool.Name(),
						pol.price.Rates(ep), p.TTFT.Round(time.Millisecond), cost, scores[i])
				}
				return sb.String()
			case "pick":
				req := request(d)
				ep, err := pol.Pick(context.Background(), req, reg.Endpoints())
				if err != nil {
					return err.Error()
				}
				last = req
				return fmt.Sprintf("ep%d %s", ep.Index, ep.Pool.Name())
			case "done":
				o := Outcome{TTFT: dur(d, "ttft")}
				d.ScanArgs(t, "prompt", &o.PromptTokens)
				d.MaybeScanArgs(t, "cached", &o.CachedTokens)
				d.ScanArgs(t, "completion", &o.CompletionTokens)
				clock = clock.Add(dur(d, "elapsed"))
				ep := last.Routing.Endpoint
				pol.Done(last, ep, o)
				return fmt.Sprintf("ep%d %s: %s", ep.Index, ep.Pool.Name(), pol.price.Rates(ep))
			case "load":
				var i, w, r int
				d.ScanArgs(t, "ep", &i)
				d.MaybeScanArgs(t, "waiting", &w)
				d.MaybeScanArgs(t, "running", &r)
				reg.Endpoints()[i].SetLoad(pools.Load{Waiting: w, Running: r, ScrapedAt: clock})
				return ""
			case "record":
				var i int
				var r string
				d.ScanArgs(t, "ep", &i)
				d.ScanArgs(t, "prompt", &r)
				index.Record(i, kv.HBM, parseBlocks(t, r))
				return ""
			case "advance":
				clock = clock.Add(dur(d, "by"))
				for _, ep := range reg.Endpoints() {
					l := ep.Load()
					l.ScrapedAt = clock
					ep.SetLoad(l)
				}
				return ""
			case "counters":
				return counters(t, prom, "turnpike_affinity_price_decisions_total", "turnpike_affinity_decisions_total")
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	})
}

// priceScorerOn is a price scorer over a mixed fleet of n H200 and n TPU
// endpoints, each with a fresh load report, and a cycle of a 4000-token
// prompt with a 64-token answer over them; release the cycle when done.
func priceScorerOn(t testing.TB, n int) (*Price, *Cycle, []*pools.Endpoint) {
	reg := newMixedFleet(t, n, n)
	for _, ep := range reg.Endpoints() {
		setLoad(ep, 1, 0.2, t0)
	}
	cfg := Config{Policy: PolicyCostAware}
	cfg.EnsureDefaults()
	ttft := NewTTFTModel(cfg.PrefillRate, cfg.Smoothing, NewEndpointStats(cfg.PrefillRate, cfg.Smoothing), nil)
	s := &Price{TierWeights: kv.DefaultTierWeights, Model: NewPriceModel(cfg.Cost, cfg.Smoothing, ttft)}
	req := &Request{Model: "m", PromptTokens: 4000, ExpectedOutputTokens: 64}
	return s, newCycle(req, reg.Endpoints(), t0), reg.Endpoints()
}

// TestPriceScoreAllocs proves the price scorer allocation-free.
func TestPriceScoreAllocs(t *testing.T) {
	s, c, eps := priceScorerOn(t, 4)
	defer c.release()
	scores := make([]float64, len(eps))
	s.Score(c, eps, scores) // grow the per-endpoint tables
	if n := testing.AllocsPerRun(100, func() { s.Score(c, eps, scores) }); n != 0 {
		t.Errorf("Score allocates %v times a run", n)
	}
}

func BenchmarkPriceScore(b *testing.B) {
	s, c, eps := priceScorerOn(b, 8)
	defer c.release()
	scores := make([]float64, len(eps))
	b.ReportAllocs()
	for b.Loop() {
		s.Score(c, eps, scores)
	}
}

func TestCostConfig(t *testing.T) {
	cfg := Config{Policy: PolicyCostAware}
	cfg.EnsureDefaults()
	if len(cfg.Scorers) != len(CostAwareScorers) || cfg.Scorers[0].Name != ScorerPrice || cfg.Scorers[0].Weight != DefaultPriceWeight {
		t.Errorf("cost-aware scorers %v", cfg.Scorers)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cache := Config{}
	cache.EnsureDefaults()
	for _, s := range cache.Scorers {
		if s.Name == ScorerPrice {
			t.Error("the cache-aware defaults price turns")
		}
	}
	bad := Config{Cost: CostConfig{
		TTFTTargets:          map[string]time.Duration{"urgent": time.Second, BandStandard: -time.Second},
		Prices:               map[string]float64{"h200": -1},
		ExpectedOutputTokens: -1,
		PriorBatch:           -2,
	}}
	err := bad.Validate()
	for _, want := range []string{`unknown band "urgent"`, "cost.ttftTargets[standard]", "cost.prices[h200]", "cost.expectedOutputTokens", "cost.priorBatch"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q in it", err, want)
		}
	}
	// A target left out takes its default; one set replaces it.
	m := NewPriceModel(CostConfig{TTFTTargets: map[string]time.Duration{BandInteractive: 300 * time.Millisecond}}, 0.2, nil)
	for _, tc := range []struct {
		req  Request
		want time.Duration
	}{
		{Request{Band: BandInteractive}, 300 * time.Millisecond},
		{Request{Interactive: true}, 300 * time.Millisecond},
		{Request{}, 4 * time.Second},
		{Request{Band: BandBackground}, 30 * time.Second},
	} {
		if got := m.target(&tc.req); got != tc.want {
			t.Errorf("target of %+v = %v, want %v", tc.req, got, tc.want)
		}
	}
}
