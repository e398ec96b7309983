package affinity

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// pickFixture is a 64-endpoint fleet over a prefix index of about 100k
// blocks: 64 sessions × 1500 blocks each spread over the fleet, sharing a
// 64-block system prompt held everywhere.
type pickFixture struct {
	reg    *pools.Registry
	policy *CacheAware
	req    *Request
}

func newPickFixture(tb testing.TB) *pickFixture {
	const endpoints, sessionsN, blocks = 64, 64, 1500
	reg := newFleet(tb, endpoints)
	index := kv.NewIndex(kv.IndexOptions{})
	store, err := sessions.NewStore(sessions.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	for i, ep := range reg.Endpoints() {
		setLoad(ep, i%7, float64(i%10)/10, now.Add(time.Hour)) // fresh for the benchmark's life
	}
	system := make([]kv.BlockHash, 64)
	for i := range system {
		system[i] = kv.BlockHash(i + 1)
	}
	var req *Request
	for s := range sessionsN {
		hashes := append([]kv.BlockHash(nil), system...)
		for b := range blocks - len(system) {
			hashes = append(hashes, kv.BlockHash(uint64(s+1)<<32|uint64(b)))
		}
		index.Record(s%endpoints, kv.HBM, hashes)
		for _, ep := range reg.Endpoints() {
			index.Record(ep.Index, kv.HBM, system)
		}
		if s == 17 {
			req = &Request{Model: "m", Tenant: "t", SessionKey: fmt.Sprint("s", s), PromptTokens: blocks * 16, Hashes: hashes}
		}
	}
	if n := index.Len(); n < 90_000 {
		tb.Fatalf("index holds %d blocks, want about 100k", n)
	}
	p, err := NewPolicy(Config{}, Deps{Index: index, Sessions: store, Metrics: prometheus.NewRegistry()})
	if err != nil {
		tb.Fatal(err)
	}
	return &pickFixture{reg: reg, policy: p.(*CacheAware), req: req}
}

// BenchmarkPick is one cache-aware routing decision over 64 endpoints and
// the 100k-block index, for an 8k-token prompt (500 blocks) and a
// 24k-token one (1500 blocks), each held by one endpoint: the prefix match
// walks the whole chain, and the speculative record touches every block.
func BenchmarkPick(b *testing.B) {
	f := newPickFixture(b)
	ctx := context.Background()
	full := f.req.Hashes
	for _, blocks := range []int{500, 1500} {
		b.Run(fmt.Sprintf("prompt=%dblocks", blocks), func(b *testing.B) {
			req := *f.req
			req.Hashes = full[:blocks]
			req.PromptTokens = blocks * 16
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.policy.Pick(ctx, &req, f.reg.Endpoints()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestCacheAwarePickDoesNotAllocate(t *testing.T) {
	f := newPickFixture(t)
	ctx := context.Background()
	ep, err := f.policy.Pick(ctx, f.req, f.reg.Endpoints()) // warm: pin the session, fill the pools
	if err != nil {
		t.Fatal(err)
	}
	if ep.Index != 17 {
		t.Errorf("picked endpoint %d, want 17, which holds the session's prompt", ep.Index)
	}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := f.policy.Pick(ctx, f.req, f.reg.Endpoints()); err != nil {
			t.Fatal(err)
		}
		f.policy.Done(f.req, f.req.Routing.Endpoint, Outcome{PromptTokens: 24000, CachedTokens: 23000, TTFT: 50 * time.Millisecond})
	})
	if allocs != 0 && !raceEnabled {
		t.Errorf("Pick+Done: %v allocs, want 0", allocs)
	}
}
