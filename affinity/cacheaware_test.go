package affinity

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// parseBlocks reads "1-10,101-104" as the hashes 1..10, 101..104.
func parseBlocks(t testing.TB, s string) []kv.BlockHash {
	var out []kv.BlockHash
	for _, part := range strings.Split(s, ",") {
		lo, hi, ok := strings.Cut(part, "-")
		if !ok {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		for v := a; v <= b; v++ {
			out = append(out, kv.BlockHash(v))
		}
	}
	return out
}

// TestCacheAware runs the routing specification in testdata/cache_aware.
//
//	fleet n=N [guard=off] [scorers=a,b|weighted] [smoothing=S] [maxEngineQueue=N]  a fresh fleet, index, session store, policy
//	load ep=I waiting=W [kv=U]        a fresh load report
//	health ep=I down|up               the health verdict
//	drain ep=I                        drain the endpoint
//	record ep=I prompt=R [tier=T]     the index learns the endpoint holds R
//	pick [tenant=T] [session=S] [band=B] prompt=R   route a request (B: interactive, standard, background)
//	done [err] [prompt=N cached=N ttft=D]  the outcome of the last pick
//	counters                          decisions and pin changes so far
//	costs prompt=R                    each endpoint's predicted TTFT of R
//	model ep=I                        the endpoint's learned coefficients
//	advance by=D                      move the clock
func TestCacheAware(t *testing.T) {
	datadriven.Walk(t, "testdata/cache_aware", runPolicySpec)
}

// TestTTFTCost runs the specification of the one cost, predicted time to
// first token, in testdata/cost.
func TestTTFTCost(t *testing.T) {
	datadriven.Walk(t, "testdata/cost", runPolicySpec)
}

func runPolicySpec(t *testing.T, path string) {
	{
		clock := t0
		var (
			reg   *pools.Registry
			index *kv.Index
			store *sessions.Store
			prom  *prometheus.Registry
			pol   *CacheAware
			last  *Request
			ctx   = context.Background()
		)
		epArg := func(d *datadriven.TestData) *pools.Endpoint {
			var i int
			d.ScanArgs(t, "ep", &i)
			return reg.Endpoints()[i]
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "fleet":
				var n int
				d.ScanArgs(t, "n", &n)
				reg = newFleet(t, n)
				index = kv.NewIndex(kv.IndexOptions{})
				prom = prometheus.NewRegistry()
				var err error
				if store, err = sessions.NewStore(sessions.Options{Metrics: prom, Pins: &sessions.MemPinStore{}}); err != nil {
					t.Fatal(err)
				}
				cfg := Config{}
				if d.HasArg("guard") {
					cfg.LoadGuard.Disabled = true
				}
				d.MaybeScanArgs(t, "smoothing", &cfg.Smoothing)
				d.MaybeScanArgs(t, "maxEngineQueue", &cfg.MaxEngineQueue)
				var names string
				if d.MaybeScanArgs(t, "scorers", &names) && names == "weighted" {
					cfg.Scorers = WeightedScorers
				} else if names != "" {
					cfg.Scorers = []ScorerConfig{}
					for _, n := range strings.Split(names, ",") {
						cfg.Scorers = append(cfg.Scorers, ScorerConfig{Name: n})
					}
				}
				p, err := NewPolicy(cfg, Deps{
					Index: index, Sessions: store, Metrics: prom,
					Rand: seqRand(1), Now: func() time.Time { return clock },
				})
				if err != nil {
					t.Fatal(err)
				}
				pol = p.(*CacheAware)
				for _, ep := range reg.Endpoints() {
					setLoad(ep, 0, 0, t0)
				}
				return ""
			case "load":
				var w, r int
				var u float64
				d.MaybeScanArgs(t, "waiting", &w)
				d.MaybeScanArgs(t, "kv", &u)
				d.MaybeScanArgs(t, "running", &r)
				epArg(d).SetLoad(pools.Load{Waiting: w, Running: r, KVUsage: u, ScrapedAt: clock})
				return ""
			case "advance":
				var by string
				d.ScanArgs(t, "by", &by)
				dur, err := time.ParseDuration(by)
				if err != nil {
					t.Fatal(err)
				}
				clock = clock.Add(dur)
				for _, ep := range reg.Endpoints() {
					l := ep.Load()
					l.ScrapedAt = clock
					ep.SetLoad(l)
				}
				return ""
			case "costs":
				var r string
				d.ScanArgs(t, "prompt", &r)
				req := &Request{Model: "m", Tenant: "t", PromptTokens: 1, Hashes: parseBlocks(t, r)}
				c := newCycle(req, reg.Endpoints(), clock)
				defer c.release()
				c.BlockSize = pol.blockSize
				pol.matchPrefix(c, reg.Endpoints(), false)
				var sb strings.Builder
				for _, ep := range reg.Endpoints() {
					p := pol.model.Predict(ep, uncachedTokens(c, ep, &pol.weights), clock)
					fmt.Fprintf(&sb, "ep%d: queued=%.0f uncached=%.0f sequences=%.0f ttft=%v\n", ep.Index, p.Queued, p.Uncached, p.Sequences, p.TTFT.Round(time.Microsecond))
				}
				return sb.String()
			case "model":
				rate, per := pol.model.Coefficients(epArg(d).Index)
				return fmt.Sprintf("prefill %.0f tokens/s, decode %.2fms a sequence", rate, per*1000)
			case "health":
				epArg(d).SetHealthy(d.HasArg("up"))
				return ""
			case "drain":
				epArg(d).SetDraining(true)
				return ""
			case "record":
				var r, tier string
				d.ScanArgs(t, "prompt", &r)
				tr := kv.HBM
				if d.MaybeScanArgs(t, "tier", &tier) {
					var err error
					if tr, err = kv.ParseTier(tier); err != nil {
						t.Fatal(err)
					}
				}
				index.Record(epArg(d).Index, tr, parseBlocks(t, r))
				return ""
			case "pick":
				var r string
				req := &Request{Model: "m", Tenant: "t", PromptTokens: 1}
				d.MaybeScanArgs(t, "tenant", &req.Tenant)
				d.MaybeScanArgs(t, "session", &req.SessionKey)
				d.MaybeScanArgs(t, "band", &req.Band)
				d.ScanArgs(t, "prompt", &r)
				req.Hashes = parseBlocks(t, r)
				ep, err := pol.Pick(ctx, req, reg.Endpoints())
				if err != nil {
					return err.Error()
				}
				last = req
				out := fmt.Sprintf("ep%d cached=%d/%d", ep.Index, req.Routing.CachedBlocks, len(req.Hashes))
				if req.SessionKey != "" {
					st, _ := store.Get(req.Tenant, req.SessionKey, clock)
					out += " pin=" + st.Endpoint
				}
				return out
			case "done":
				var o Outcome
				if d.HasArg("err") {
					o.Err = errors.New("upstream failed")
				}
				d.MaybeScanArgs(t, "prompt", &o.PromptTokens)
				d.MaybeScanArgs(t, "cached", &o.CachedTokens)
				var ttft string
				if d.MaybeScanArgs(t, "ttft", &ttft) {
					o.TTFT, _ = time.ParseDuration(ttft)
				}
				ep := last.Routing.Endpoint
				pol.Done(last, ep, o)
				m := make([]kv.Match, len(reg.Endpoints()))
				index.MatchPrefix(last.Hashes, m)
				return fmt.Sprintf("ep%d holds %d/%d; prefill rate %.0f tokens/s",
					ep.Index, m[ep.Index].Blocks, len(last.Hashes), pol.Stats().PrefillRate(ep.Index))
			case "counters":
				return counters(t, prom, "turnpike_affinity_decisions_total", "turnpike_session_pin_changes_total")
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
	}
}
