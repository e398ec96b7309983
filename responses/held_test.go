package responses

import (
	"maps"
	"testing"
)

// TestHeldCountsRoundTrip: what a service holds is what its peers read.
func TestHeldCountsRoundTrip(t *testing.T) {
	s := &Service{}
	s.mu.heldByTenant = map[string]int{"acme": 3, "globex": 1}
	c := heldCodec{s}
	if _, empty := c.Report(nil); !empty {
		t.Fatal("a service holding nothing reports something")
	}
	s.mu.held = 4
	body, empty := c.Report(nil)
	if empty {
		t.Fatal("a service holding 4 reports nothing")
	}
	got, err := c.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	if got.Total != 4 || !maps.Equal(got.ByTenant, s.mu.heldByTenant) {
		t.Errorf("decoded %+v, want 4 and %v", got, s.mu.heldByTenant)
	}
	for _, bad := range [][]byte{nil, {1}, {1, 1, 1, 'a'}, {1, 1, 1, 'a', 0}, {2, 2, 1, 'a', 1, 1, 'a', 1}, append(body, 0)} {
		if _, err := c.Decode(bad); err == nil {
			t.Errorf("Decode(%q) accepted it", bad)
		}
	}
}

// FuzzDecodeHeld: another gateway's counts decode to non-negative counts
// of distinct tenants, or are refused; never a panic.
func FuzzDecodeHeld(f *testing.F) {
	s := &Service{}
	s.mu.held, s.mu.heldByTenant = 2, map[string]int{"t": 2}
	seed, _ := heldCodec{s}.Report(nil)
	f.Add(seed)
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		h, err := heldCodec{}.Decode(body)
		if err != nil {
			return
		}
		if h.Total < 0 || len(h.ByTenant) > len(body)/3 {
			t.Fatalf("decoded %+v from %d bytes", h, len(body))
		}
		for tenant, n := range h.ByTenant {
			if tenant == "" || n <= 0 {
				t.Fatalf("tenant %q holds %d", tenant, n)
			}
		}
	})
}
