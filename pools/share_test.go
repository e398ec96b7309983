package pools

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/gossip"
)

// TestLoadShareTwoGateways: two gateways' registries over one broadcast.
// What one has in flight on an endpoint the other counts in InFlight and
// InFlightTokens, under the same endpoint, whatever its index there; when
// the requests end, and when the gateway stops, the other stops counting
// them.
func TestLoadShareTwoGateways(t *testing.T) {
	bc := &gossip.Loopback{}
	ra := newTestRegistry(t, "http://e1:8000", "http://e2:8000")
	rb := newTestRegistry(t, "http://e2:8000", "http://e1:8000") // other order: ids, not indexes, cross
	a, err := NewLoadShare(ra, gossip.Config{Transport: bc, Origin: "a", Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewLoadShare(rb, gossip.Config{Transport: bc, Origin: "b", Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a.Start(t.Context())
	b.Start(t.Context())
	defer b.Close(context.Background())

	// A has three requests on e1 (its endpoint 0), one on e2.
	ra.Endpoints()[0].inFlight.Add(3)
	ra.Endpoints()[0].inFlightTokens.Add(30_000)
	ra.Endpoints()[1].inFlight.Add(1)
	ra.Endpoints()[1].inFlightTokens.Add(500)
	e1, e2 := rb.Endpoints()[1], rb.Endpoints()[0]
	waitFor(t, "B counts A's requests", func() bool {
		return e1.InFlight() == 3 && e1.InFlightTokens() == 30_000 && e2.InFlight() == 1 && e2.InFlightTokens() == 500
	})
	if e1.OwnInFlight() != 0 || e1.OwnInFlightTokens() != 0 {
		t.Errorf("B's own count on e1 = %d (%d tokens), want 0: peers' are not its own", e1.OwnInFlight(), e1.OwnInFlightTokens())
	}
	// B's own request adds to A's, and A sees it too.
	e1.inFlight.Add(1)
	waitFor(t, "A counts B's request", func() bool { return ra.Endpoints()[0].InFlight() == 4 })
	if got := e1.InFlight(); got != 4 {
		t.Errorf("B's e1 in flight = %d, want 3 of A's and 1 of its own", got)
	}

	// A's requests end.
	ra.Endpoints()[0].inFlight.Add(-3)
	ra.Endpoints()[0].inFlightTokens.Add(-30_000)
	waitFor(t, "B sees A's e1 requests end", func() bool { return e1.InFlight() == 1 && e1.Peers() == PeerLoad{} })
	if e2.InFlight() != 1 {
		t.Errorf("B's e2 in flight = %d, want A's 1", e2.InFlight())
	}
	// A stops: B forgets it at once, not after MaxAge.
	a.Close(context.Background())
	waitFor(t, "B forgets A once it stops", func() bool { return e2.Peers() == PeerLoad{} })
	if got := b.Fresh(); got != 0 {
		t.Errorf("B hears %d peers after A stopped, want 0", got)
	}
}

// TestLoadReportRoundTrip: a report decodes, on a gateway that lists the
// engines in another order and one more, to what was reported, by that
// gateway's endpoint indexes; an idle gateway reports nothing; damaged
// bodies are refused.
func TestLoadReportRoundTrip(t *testing.T) {
	r := newTestRegistry(t, "http://e1:8000", "http://e2:8000", "http://e3:8000")
	c := &loadCodec{reg: r}
	if _, empty := c.Report(nil); !empty {
		t.Fatal("an idle gateway's report is not empty")
	}
	r.Endpoints()[1].inFlightTokens.Store(1000)
	r.Endpoints()[2].inFlight.Store(5)
	r.Endpoints()[2].inFlightTokens.Store(1 << 40)
	body, empty := c.Report(nil)
	if empty {
		t.Fatal("a busy gateway's report is empty")
	}
	peer := newTestRegistry(t, "http://e3:8000", "http://e0:8000", "http://e2:8000", "http://e1:8000")
	pc := &loadCodec{reg: peer}
	got, err := pc.Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	// e2 has tokens and no request in flight (a count racing its tokens):
	// listed too. e1 nothing.
	want := []PeerLoad{{InFlight: 5, InFlightTokens: 1 << 40}, {}, {InFlightTokens: 1000}, {}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("decoded %v, want %v", got, want)
	}
	for _, bad := range [][]byte{nil, {0}, append(bytes.Clone(body), 0), body[:len(body)-1]} {
		if _, err := pc.Decode(bad); err == nil {
			t.Errorf("Decode(%q) accepted it", bad)
		}
	}
}

// FuzzDecodeLoadReport: a report body from the wire either decodes, to a
// snapshot of the gateway's endpoints with no negative figure, or is
// refused; it never panics.
func FuzzDecodeLoadReport(f *testing.F) {
	r, err := NewRegistry([]PoolConfig{{Name: "p", ServedModels: []string{"m"}, Endpoints: []EndpointConfig{{URL: "http://e1:8000"}, {URL: "http://e2:8000"}}}}, Options{}, nil)
	if err != nil {
		f.Fatal(err)
	}
	c := &loadCodec{reg: r}
	r.Endpoints()[1].inFlight.Store(3)
	seed, _ := c.Report(nil)
	f.Add(seed)
	f.Add([]byte{1, 1, 'x', 0, 0})
	f.Add([]byte{1, 7, 'e', '1', ':', '8', '0', '0', '0', 0xff, 0xff, 0xff, 0xff, 0x0f, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		load, err := c.Decode(body)
		if err != nil {
			return
		}
		if len(load) != len(r.Endpoints()) {
			t.Fatalf("snapshot of %d endpoints, want %d", len(load), len(r.Endpoints()))
		}
		c.Peers([][]PeerLoad{load, load})
		for _, ep := range r.Endpoints() {
			if p := ep.Peers(); p.InFlight < 0 || p.InFlightTokens < 0 {
				t.Fatalf("negative peer load %+v", p)
			}
		}
	})
}
