package affinity

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

// explainFleet is a pool of n endpoints, with KV events when events is set,
// and a cache-aware policy over a fresh index.
func explainFleet(t *testing.T, n int, events bool) (*pools.Registry, *kv.Index, *CacheAware, *prometheus.Registry) {
	t.Helper()
	var eps []pools.EndpointConfig
	for i := range n {
		ec := pools.EndpointConfig{URL: fmt.Sprintf("http://10.0.0.%d:8000", i+1)}
		if events {
			ec.KVEvents = fmt.Sprintf("tcp://10.0.0.%d:5557", i+1)
		}
		eps = append(eps, ec)
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: eps}}, pools.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range reg.Endpoints() {
		setLoad(ep, 0, 0, t0)
	}
	index := kv.NewIndex(kv.IndexOptions{})
	prom := prometheus.NewRegistry()
	p, err := NewPolicy(Config{}, Deps{Index: index, Metrics: prom, Rand: seqRand(1), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return reg, index, p.(*CacheAware), prom
}

// chain is blocks distinct block hashes from base.
func chain(base kv.BlockHash, blocks int) []kv.BlockHash {
	out := make([]kv.BlockHash, blocks)
	for i := range out {
		out[i] = base + kv.BlockHash(i)
	}
	return out
}

// TestCachePrediction: the prediction on the pick and the best other, in
// the header's words, and each outcome's result and cause.
func TestCachePrediction(t *testing.T) {
	const bs = kv.DefaultBlockSize
	prompt := 10*bs + 5
	cases := []struct {
		name    string
		events  bool
		tier    kv.Tier
		cached  int // the engine's cached_tokens
		result  string
		cause   string
		predict int
	}{
		{name: "hit", events: true, cached: 8 * bs, result: PredictionHit, predict: 8 * bs},
		{name: "one block short is a hit", events: true, cached: 7 * bs, result: PredictionHit, predict: 8 * bs},
		{name: "surplus", events: true, cached: 10 * bs, result: PredictionSurplus, predict: 8 * bs},
		{name: "never there", events: true, cached: 0, result: PredictionMiss, cause: MissNeverThere, predict: 8 * bs},
		{name: "unknown without KV events", cached: 0, result: PredictionMiss, cause: MissUnknown, predict: 8 * bs},
		{name: "another tier", events: true, tier: kv.CPU, cached: 2 * bs, result: PredictionMiss, cause: MissAnotherTier, predict: 8 * bs},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg, index, p, prom := explainFleet(t, 2, tc.events)
			eps := reg.Endpoints()
			hashes := chain(1000, 10)
			index.Record(eps[0].Index, tc.tier, hashes[:8])
			index.Record(eps[1].Index, kv.HBM, hashes[:3])
			req := &Request{Model: "m", PromptTokens: prompt, Hashes: hashes}
			ep, err := p.Pick(context.Background(), req, eps)
			if err != nil {
				t.Fatal(err)
			}
			if ep != eps[0] {
				t.Fatalf("picked %s, want the endpoint holding 8 blocks", ep.ID)
			}
			pred, ok := req.CachePrediction()
			if !ok {
				t.Fatal("no prediction")
			}
			want := "predicted=" + strconv.Itoa(tc.predict) + "; best_other=" + strconv.Itoa(3*bs) + "; endpoint=" + eps[0].ID
			if got := pred.String(); got != want {
				t.Errorf("header = %q, want %q", got, want)
			}
			p.Done(req, ep, Outcome{PromptTokens: prompt, CachedTokens: tc.cached})
			got := counters(t, prom, "turnpike_affinity_cache_predictions_total", "turnpike_affinity_cache_misses_total")
			wantC := "turnpike_affinity_cache_predictions_total{result=" + tc.result + "} 1"
			if tc.cause != "" {
				wantC = "turnpike_affinity_cache_misses_total{cause=" + tc.cause + "} 1\n" + wantC
			}
			if got = strings.TrimSpace(got); got != wantC {
				t.Errorf("counters:\n%s\nwant:\n%s", got, wantC)
			}
			acc, ok := CacheAccuracyOf(p, eps[0])
			if !ok || acc.Turns != 1 || acc.PredictedTokens != int64(tc.predict) || acc.DeliveredTokens != int64(tc.cached) {
				t.Errorf("accuracy = %+v, %v", acc, ok)
			}
			if tc.cause != "" && acc.Misses[tc.cause] != 1 {
				t.Errorf("accuracy misses = %v, want one %s", acc.Misses, tc.cause)
			}
			if _, ok := CacheAccuracyOf(p, eps[1]); ok {
				t.Error("an endpoint that served no turn has an account")
			}
		})
	}
}

// TestMissCause is the order of the causes: the first that holds.
func TestMissCause(t *testing.T) {
	cases := []struct {
		name string
		tc   turnCache
		want string
	}{
		{"adapter first", turnCache{adapter: true, lowerTier: 2, events: true, removed: true}, MissAnotherAdapter},
		{"lower tier", turnCache{lowerTier: 1, events: true, removed: true}, MissAnotherTier},
		{"no events", turnCache{removed: true}, MissUnknown},
		{"stale", turnCache{events: true, stale: true, removed: true}, MissUnknown},
		{"evicted", turnCache{events: true, removed: true}, MissEvicted},
		{"never there", turnCache{events: true}, MissNeverThere},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := causeNames[c.tc.cause()]; got != c.want {
				t.Errorf("cause = %s, want %s", got, c.want)
			}
		})
	}
}

// TestMissCausesSumToMisses: over turns of every kind, the misses by
// cause sum to the misses, counted here from the definition (the engine
// cached fewer than predicted by more than one block), in the metrics and
// in the endpoints' accounts.
func TestMissCausesSumToMisses(t *testing.T) {
	const bs = kv.DefaultBlockSize
	rng := rand.New(rand.NewPCG(1, 2))
	misses := 0
	var proms []*prometheus.Registry
	var accounted int64
	for _, events := range []bool{true, false} {
		reg, index, p, prom := explainFleet(t, 3, events)
		proms = append(proms, prom)
		eps := reg.Endpoints()
		for turn := range 300 {
			blocks := 1 + rng.IntN(12)
			prompt := blocks*bs + rng.IntN(bs)
			hashes := chain(kv.BlockHash(1_000_000*(turn+1)), blocks)
			held := rng.IntN(blocks + 1)
			index.Record(eps[rng.IntN(len(eps))].Index, kv.Tier(rng.IntN(2)), hashes[:held])
			req := &Request{Model: "m", PromptTokens: prompt, Hashes: hashes}
			ep, err := p.Pick(context.Background(), req, eps)
			if err != nil {
				t.Fatal(err)
			}
			cached := rng.IntN(prompt)
			if deliverable(req.Routing.CachedBlocks, prompt, bs)-cached > bs {
				misses++
			}
			p.Done(req, ep, Outcome{PromptTokens: prompt, CachedTokens: cached})
		}
		for _, ep := range eps {
			acc, _ := CacheAccuracyOf(p, ep)
			for _, n := range acc.Misses {
				accounted += n
			}
		}
	}
	if misses == 0 {
		t.Fatal("no misses: the test proves nothing")
	}
	var byCause, counted float64
	for _, prom := range proms {
		byCause += sumCounters(t, prom, "turnpike_affinity_cache_misses_total", "")
		counted += sumCounters(t, prom, "turnpike_affinity_cache_predictions_total", "result="+PredictionMiss)
	}
	if int(byCause) != misses || int(counted) != misses || int(accounted) != misses {
		t.Errorf("misses by cause %v, counted %v, in the accounts %d; want %d", byCause, counted, accounted, misses)
	}
}

// sumCounters sums the counters of family name in r whose labels include
// label ("name=value"; "" for all).
func sumCounters(t *testing.T, r *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName()+"="+l.GetValue() == label
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
