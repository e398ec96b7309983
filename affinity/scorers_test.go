package affinity

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

func near(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

func TestScorers(t *testing.T) {
	reg := newFleet(t, 3)
	eps := reg.Endpoints()
	stats := NewEndpointStats(1000, DefaultSmoothing)
	stats.Observe(2, 4000, time.Second) // endpoint 2 prefills at 4000 tokens/s
	for _, tc := range []struct {
		name    string
		scorer  Scorer
		cycle   Cycle
		waiting []int
		kvUsage []float64
		want    []float64
	}{
		{
			// Weighted 10, 9 and 2 blocks; the 2 every candidate holds count
			// for nothing.
			name:   "prefix by tier beyond the least cached, over prompt blocks",
			scorer: &Prefix{TierWeights: kv.DefaultTierWeights},
			cycle: Cycle{PromptBlocks: 10, Matches: []kv.Match{
				{Blocks: 10, ByTier: [kv.NumTiers]int{kv.HBM: 10}},
				{Blocks: 10, ByTier: [kv.NumTiers]int{kv.HBM: 5, kv.CPU: 5}},
				{Blocks: 4, ByTier: [kv.NumTiers]int{kv.Disk: 4}},
			}},
			want: []float64{0.8, 0.7, 0},
		},
		{
			name:   "prefix of a stale endpoint is discounted",
			scorer: &Prefix{TierWeights: kv.DefaultTierWeights},
			cycle: Cycle{PromptBlocks: 4, Matches: []kv.Match{
				{Blocks: 4, ByTier: [kv.NumTiers]int{kv.HBM: 4}, Stale: true},
			}},
			want: []float64{0.5, 0, 0},
		},
		{
			name:   "prefix without hashes",
			scorer: &Prefix{TierWeights: kv.DefaultTierWeights},
			want:   []float64{0, 0, 0},
		},
		{
			name:   "session pin",
			scorer: Session{},
			cycle:  Cycle{PinnedID: eps[1].ID},
			want:   []float64{0, 1, 0},
		},
		{
			name:    "queue relative to the longest",
			scorer:  Queue{},
			waiting: []int{0, 2, 8},
			want:    []float64{1, 0.75, 0},
		},
		{
			name:    "queue all empty",
			scorer:  Queue{},
			waiting: []int{0, 0, 0},
			want:    []float64{1, 1, 1},
		},
		{
			name:    "kv utilization",
			scorer:  KVUtilization{},
			waiting: []int{0, 0, 0},
			kvUsage: []float64{0, 0.25, 1},
			want:    []float64{1, 0.75, 0},
		},
		{
			name:   "kv utilization of stale loads is neutral",
			scorer: KVUtilization{},
			want:   []float64{0.5, 0.5, 0.5},
		},
		{
			// Prompt 1600 tokens. e0 holds 62 blocks, 992 tokens, and prefills at the prior
			// 1000/s: 0.608s. e1 holds nothing, queue 1 at the prior, mean
			// unknown so the request's own 1600: 3.2s. e2 holds nothing at
			// a measured 4000/s with a measured mean of 4000 tokens and
			// queue 0: 0.4s, the fastest.
			name:    "predicted ttft",
			scorer:  &PredictedTTFT{TierWeights: kv.DefaultTierWeights, Stats: stats},
			waiting: []int{0, 1, 0},
			cycle: Cycle{PromptBlocks: 100, BlockSize: 16, Matches: []kv.Match{
				{Blocks: 62, ByTier: [kv.NumTiers]int{kv.HBM: 62}}, {}, {},
			}},
			want: []float64{0.4 / 0.608, 0.4 / 3.2, 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, ep := range eps {
				if tc.waiting == nil {
					ep.SetLoad(pools.Load{}) // stale
					continue
				}
				var u float64
				if tc.kvUsage != nil {
					u = tc.kvUsage[i]
				}
				setLoad(ep, tc.waiting[i], u, t0)
			}
			c := tc.cycle
			c.Now = t0
			c.Request = &Request{}
			scores := make([]float64, len(eps))
			tc.scorer.Score(&c, eps, scores)
			if !near(scores, tc.want) {
				t.Errorf("%s: scores = %v, want %v", tc.scorer.Name(), scores, tc.want)
			}
		})
	}
}

func TestInFlightTokens(t *testing.T) {
	srv := func() *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "{}")
		}))
	}
	a, b := srv(), srv()
	defer a.Close()
	defer b.Close()
	reg := newFleetURLs(t, 3, []string{a.URL, b.URL})
	defer reg.Close(context.Background())
	send := func(ep *pools.Endpoint, tokens int64) *http.Response {
		resp, err := reg.Client().Send(context.Background(), ep, "/v1/chat/completions", []byte("{}"), nil, tokens)
		if err != nil {
			t.Fatal(err)
		}
		return resp // in flight until its body is closed
	}
	r1, r2 := send(reg.Endpoints()[0], 1000), send(reg.Endpoints()[1], 250)
	scores := make([]float64, 3)
	InFlightTokens{}.Score(&Cycle{Request: &Request{}}, reg.Endpoints(), scores)
	if want := []float64{0, 0.75, 1}; !near(scores, want) {
		t.Errorf("scores = %v, want %v", scores, want)
	}
	r1.Body.Close()
	r2.Body.Close()
}

func TestLoadGuard(t *testing.T) {
	g := &LoadGuard{Factor: 1.5, Slack: 4}
	for _, tc := range []struct {
		name    string
		waiting []int
		scores  []float64
		picked  int
		want    int
	}{
		{"idle pool keeps the pick", []int{0, 0, 0, 0}, []float64{1, 0.5, 0.4, 0.3}, 0, 0},
		{"within slack keeps the pick", []int{5, 1, 1, 1}, []float64{1, 0.5, 0.4, 0.3}, 0, 0},
		// mean 4, limit 10: 13 is over; the best of the rest is 1.
		{"hot endpoint spills to the next best", []int{13, 1, 1, 1}, []float64{1, 0.5, 0.6, 0.3}, 0, 2},
		// mean 12.5, limit 22.75: 2 is over too, so the spill skips it.
		{"spill skips the overloaded", []int{24, 1, 24, 1}, []float64{1, 0.2, 0.9, 0.3}, 0, 3},
		{"a pick under the limit stays", []int{24, 1, 24, 1}, []float64{0, 0.2, 0.9, 0.3}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newFleet(t, len(tc.waiting))
			for i, ep := range reg.Endpoints() {
				setLoad(ep, tc.waiting[i], 0, t0)
			}
			if got := g.Spill(t0, reg.Endpoints(), tc.scores, tc.picked); got != tc.want {
				t.Errorf("Spill = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFilters(t *testing.T) {
	reg := newFleet(t, 4)
	eps := reg.Endpoints()
	c := &Cycle{Request: &Request{Model: "m"}, Now: t0}
	run := func(f Filter) []int {
		var out []int
		for _, ep := range f.Filter(c, append([]*pools.Endpoint(nil), eps...)) {
			out = append(out, ep.Index)
		}
		return out
	}
	eps[1].SetHealthy(false)
	eps[2].SetDraining(true)
	if got := run(Healthy{}); len(got) != 2 || got[0] != 0 || got[1] != 3 {
		t.Errorf("healthy kept %v, want [0 3]", got)
	}
	if got := run(BreakerClosed{}); len(got) != 4 {
		t.Errorf("breaker-closed kept %v, want all", got)
	}
	if got := run(ServesModel{}); len(got) != 4 {
		t.Errorf("serves-model kept %v, want all", got)
	}
	c.Request.Model = "other"
	if got := run(ServesModel{}); len(got) != 0 {
		t.Errorf("serves-model kept %v of another model, want none", got)
	}
	for i, w := range []int{64, 10, 70, 3} {
		setLoad(eps[i], w, 0, t0)
	}
	if got := run(HasRoom{MaxQueue: 64}); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Errorf("has-room kept %v, want [1 3]", got)
	}
	for _, ep := range eps {
		setLoad(ep, 100, 0, t0)
	}
	if got := run(HasRoom{MaxQueue: 64}); len(got) != 4 {
		t.Errorf("has-room with no room anywhere kept %v, want all", got)
	}
}

func TestPickers(t *testing.T) {
	m := &MaxScore{Rand: seqRand(7)}
	seen := map[int]int{}
	for range 300 {
		seen[m.Pick(nil, nil, []float64{0.2, 0.9, 0.5, 0.9 + 1e-12})]++
	}
	if len(seen) != 2 || seen[1] < 100 || seen[3] < 100 {
		t.Errorf("max-score ties picked %v, want 1 and 3 about evenly", seen)
	}
	if got := m.Pick(nil, nil, []float64{0.1, 0.3, 0.2}); got != 1 {
		t.Errorf("max-score picked %d, want 1", got)
	}
	w := &WeightedRandom{Rand: seqRand(3)}
	seen = map[int]int{}
	for range 4000 {
		seen[w.Pick(nil, nil, []float64{0, 0.25, 0.75})]++
	}
	if seen[0] != 0 || seen[1] < 800 || seen[1] > 1200 {
		t.Errorf("weighted-random picked %v, want none of 0 and about 1000 of 1", seen)
	}
	if got := w.Pick(nil, nil, []float64{0, 0}); got < 0 || got > 1 {
		t.Errorf("weighted-random over zeros picked %d", got)
	}
}
