package affinity

import (
	"context"
	"fmt"
	"testing"

	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
)

func TestSessionHashStability(t *testing.T) {
	const keys = 20000
	reg := newFleet(t, 11)
	ten, eleven := reg.Endpoints()[:10], reg.Endpoints()
	s := NewSessionHash(0)
	ctx := context.Background()
	pick := func(key string, eps []*pools.Endpoint) *pools.Endpoint {
		ep, err := s.Pick(ctx, &Request{Tenant: "t", SessionKey: key}, eps)
		if err != nil {
			t.Fatal(err)
		}
		return ep
	}
	before := make([]*pools.Endpoint, keys)
	perEndpoint := map[int]int{}
	for i := range before {
		before[i] = pick(fmt.Sprint("session-", i), ten)
		perEndpoint[before[i].Index]++
		if again := pick(fmt.Sprint("session-", i), ten); again != before[i] {
			t.Fatal("the same key moved without a change of fleet")
		}
	}
	for idx, n := range perEndpoint {
		if n < keys/10*7/10 || n > keys/10*13/10 {
			t.Errorf("endpoint %d got %d of %d keys; the ring is lopsided", idx, n, keys)
		}
	}

	t.Run("adding an endpoint moves about 1/n keys, all to it", func(t *testing.T) {
		moved := 0
		for i := range before {
			after := pick(fmt.Sprint("session-", i), eleven)
			if after != before[i] {
				moved++
				if after != eleven[10] {
					t.Fatalf("key %d moved to %s, not to the new endpoint", i, after.ID)
				}
			}
		}
		if frac := float64(moved) / keys; frac < 0.05 || frac > 0.14 {
			t.Errorf("%.3f of keys moved, want about 1/11", frac)
		}
	})

	t.Run("an unavailable endpoint's keys move, no one else's", func(t *testing.T) {
		ten[3].SetHealthy(false)
		defer ten[3].SetHealthy(true)
		for i := range before {
			after := pick(fmt.Sprint("session-", i), ten)
			if before[i] == ten[3] && after == ten[3] {
				t.Fatal("routed to the unavailable endpoint")
			}
			if before[i] != ten[3] && after != before[i] {
				t.Fatalf("key %d moved though its endpoint is up", i)
			}
		}
	})

	t.Run("tenants hash apart", func(t *testing.T) {
		same := 0
		for i := range 1000 {
			a, _ := s.Pick(ctx, &Request{Tenant: "a", SessionKey: fmt.Sprint(i)}, ten)
			b, _ := s.Pick(ctx, &Request{Tenant: "b", SessionKey: fmt.Sprint(i)}, ten)
			if a == b {
				same++
			}
		}
		if same > 200 {
			t.Errorf("%d of 1000 keys land alike for two tenants", same)
		}
	})
}

func TestSessionHashSessionless(t *testing.T) {
	reg := newFleet(t, 5)
	s := NewSessionHash(0)
	ctx := context.Background()
	// Sessionless requests that share a first block (a common system
	// prompt) still spread over the fleet rather than all landing on one.
	req := &Request{Hashes: []kv.BlockHash{42, 43}}
	seen := map[*pools.Endpoint]bool{}
	for range 5 {
		ep, _ := s.Pick(ctx, req, reg.Endpoints())
		seen[ep] = true
	}
	if len(seen) != 5 {
		t.Errorf("sessionless requests went round-robin over %d endpoints, want 5", len(seen))
	}
	allocs := testing.AllocsPerRun(100, func() { s.Pick(ctx, req, reg.Endpoints()) })
	if allocs != 0 && !raceEnabled {
		t.Errorf("warm Pick: %v allocs, want 0", allocs)
	}
}
