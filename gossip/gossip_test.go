package gossip

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// count is a codec whose snapshot is one number; Peers keeps their sum.
type count struct {
	mu   sync.Mutex
	own  uint64
	sum  uint64
	seen int
}

func (c *count) set(n uint64) {
	c.mu.Lock()
	c.own = n
	c.mu.Unlock()
}

func (c *count) Report(dst []byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.own == 0 {
		return dst, true
	}
	return binary.AppendUvarint(dst, c.own), false
}

func (c *count) Decode(b []byte) (uint64, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 || n != len(b) {
		return 0, errors.New("not a count")
	}
	return v, nil
}

func (c *count) Peers(s []uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sum, c.seen = 0, len(s)
	for _, v := range s {
		c.sum += v
	}
}

func (c *count) peers() (sum uint64, seen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sum, c.seen
}

// eventually polls cond until it holds; the bound is only for a failure.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestExchangeThreeGateways: three gateways on one loopback each see the
// sum of the other two's snapshots; one that reports nothing stops
// counting at once; one that stops is forgotten at once; an exchange of
// another name on the same channel is not heard.
func TestExchangeThreeGateways(t *testing.T) {
	bus := &Loopback{}
	var cs [3]*count
	var xs [3]*Exchange[uint64]
	for i := range cs {
		cs[i] = &count{}
		x, err := New(Config{Name: "count", Transport: bus, Interval: 2 * time.Millisecond}, Codec[uint64](cs[i]))
		if err != nil {
			t.Fatal(err)
		}
		x.Start(t.Context())
		defer x.Close(context.Background())
		xs[i] = x
	}
	other := &count{}
	ox, err := New(Config{Name: "other", Transport: bus, Interval: 2 * time.Millisecond}, Codec[uint64](other))
	if err != nil {
		t.Fatal(err)
	}
	other.set(1000)
	ox.Start(t.Context())
	defer ox.Close(context.Background())

	cs[0].set(1)
	cs[1].set(20)
	cs[2].set(300)
	want := [3]uint64{320, 301, 21}
	eventually(t, "each gateway sums the other two", func() bool {
		for i, c := range cs {
			if sum, _ := c.peers(); sum != want[i] {
				return false
			}
		}
		return true
	})
	if xs[0].Fresh() != 2 {
		t.Errorf("gateway 0 hears %d peers, want 2", xs[0].Fresh())
	}
	cs[1].set(0)
	eventually(t, "a gateway with nothing to report counts nothing", func() bool {
		sum, seen := cs[0].peers()
		return sum == 300 && seen == 1
	})
	xs[2].Close(context.Background())
	eventually(t, "a stopped gateway is forgotten", func() bool {
		sum, seen := cs[0].peers()
		return sum == 0 && seen == 0
	})
}

// TestExchangeForgetsSilentPeers: a peer's report counts until MaxAge
// after it was heard; a report older than the peer's last is dropped; the
// gateway's own reports and malformed ones are not applied.
func TestExchangeForgetsSilentPeers(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := &count{}
	x, err := New(Config{Name: "count", Transport: &Loopback{}, Origin: "me", MaxAge: time.Second, Metrics: m,
		Now: func() time.Time { return now }}, Codec[uint64](c))
	if err != nil {
		t.Fatal(err)
	}
	from := func(origin string, sent time.Time, n uint64) []byte {
		pc := &count{own: n}
		px, err := New(Config{Name: "count", Transport: &Loopback{}, Origin: origin}, Codec[uint64](pc))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := px.frame(nil, sent, false)
		return msg
	}
	sum := func() uint64 { s, _ := c.peers(); return s }
	x.apply(from("p", now, 2))
	x.apply(from("q", now, 3))
	if got := sum(); got != 5 {
		t.Fatalf("sum = %d, want 2+3 from two peers", got)
	}
	x.apply(from("p", now.Add(-time.Millisecond), 9))
	if got := sum(); got != 5 {
		t.Errorf("sum = %d after an out-of-order report, want 5", got)
	}
	x.apply(from("me", now, 100))
	x.apply([]byte("not a report"))
	if got := sum(); got != 5 {
		t.Errorf("sum = %d after the gateway's own report and a bad one, want 5", got)
	}
	now = now.Add(600 * time.Millisecond)
	x.apply(from("q", now, 1))
	if got := sum(); got != 3 {
		t.Errorf("sum = %d after q's new report, want 2+1", got)
	}
	now = now.Add(600 * time.Millisecond) // p silent for 1.2 s, q for 0.6 s
	x.mu.Lock()
	if x.expireLocked(now) {
		x.changedLocked()
	}
	x.mu.Unlock()
	if got := sum(); got != 1 {
		t.Errorf("sum = %d once p went silent past MaxAge, want q's 1", got)
	}
	if x.Fresh() != 1 {
		t.Errorf("fresh peers = %d, want 1", x.Fresh())
	}
	for reason, want := range map[string]float64{dropOld: 1, dropDecode: 1} {
		if n := testutil.ToFloat64(m.dropped.WithLabelValues("count", reason)); n != want {
			t.Errorf("drops for %s = %v, want %v", reason, n, want)
		}
	}
	if n := testutil.ToFloat64(m.peers.WithLabelValues("count")); n != 1 {
		t.Errorf("turnpike_gossip_peers = %v, want 1", n)
	}
}

// TestExchangeBoundsPeers: reports from more than MaxPeers gateways are
// dropped, not kept.
func TestExchangeBoundsPeers(t *testing.T) {
	c := &count{}
	x, err := New(Config{Name: "count", Transport: &Loopback{}, Origin: "me"}, Codec[uint64](c))
	if err != nil {
		t.Fatal(err)
	}
	msg := func(origin string) []byte {
		px, _ := New(Config{Name: "count", Transport: &Loopback{}, Origin: origin}, Codec[uint64](&count{own: 1}))
		m, _ := px.frame(nil, time.Now(), false)
		return m
	}
	for i := range MaxPeers + 10 {
		x.apply(msg(string(rune('a'+i%26)) + string(rune('0'+i/26))))
	}
	if sum, seen := c.peers(); seen != MaxPeers || sum != MaxPeers {
		t.Errorf("kept %d peers (sum %d), want %d", seen, sum, MaxPeers)
	}
}

// FuzzDecodeHeader: a message from the wire either decodes within itself
// or is refused, and never panics the exchange.
func FuzzDecodeHeader(f *testing.F) {
	c := &count{}
	x, err := New(Config{Name: "count", Transport: &Loopback{}, Origin: "me"}, Codec[uint64](c))
	if err != nil {
		f.Fatal(err)
	}
	px, _ := New(Config{Name: "count", Transport: &Loopback{}, Origin: "peer"}, Codec[uint64](&count{own: 7}))
	seed, _ := px.frame(nil, time.Unix(1, 0), false)
	f.Add(seed)
	final, _ := px.frame(nil, time.Unix(2, 0), true)
	f.Add(final)
	f.Add([]byte{'G', 1, 5, 'c', 'o', 'u', 'n', 't', 1, 'p', 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, err := decodeHeader(msg)
		if err == nil && len(h.name)+len(h.origin)+len(h.body) > len(msg) {
			t.Fatalf("decoded past the message: %+v", h)
		}
		x.apply(msg)
	})
}
