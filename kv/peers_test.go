package kv

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turnpike-gateway/turnpike/gossip"
)

// bus is an in-process PeerTransport: every message published reaches
// every subscriber, as Redis pub/sub does.
type bus = gossip.Loopback

func newBus() *bus { return &gossip.Loopback{} }

// tap is a transport that shows each message published to see.
type tap struct {
	*bus
	see func([]byte)
}

func (t tap) Publish(ctx context.Context, msg []byte) error {
	t.see(msg)
	return t.bus.Publish(ctx, msg)
}

type peerGateway struct {
	ix    *Index
	peers *Peers
	reg   *prometheus.Registry
}

func startPeer(t *testing.T, b *bus, names []string) *peerGateway {
	t.Helper()
	g := &peerGateway{ix: NewIndex(IndexOptions{}), reg: prometheus.NewRegistry()}
	var err error
	g.peers, err = NewPeers(PeersConfig{Index: g.ix, Names: names, Transport: b, FlushInterval: time.Millisecond, Registerer: g.reg})
	if err != nil {
		t.Fatal(err)
	}
	n := b.Subscribers()
	g.peers.Start(context.Background())
	t.Cleanup(func() { g.peers.Close(context.Background()) })
	for b.Subscribers() == n {
		time.Sleep(time.Millisecond)
	}
	return g
}

func chain(seed, n int) []BlockHash {
	hs := make([]BlockHash, n)
	for i := range hs {
		hs[i] = BlockHash(seed*1000 + i + 1)
	}
	return hs
}

func TestPeersShareRoutedRecords(t *testing.T) {
	b := newBus()
	// The two gateways list the engines in different orders: ids are
	// local, names are shared.
	a := startPeer(t, b, []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"})
	g := startPeer(t, b, []string{"10.0.0.3:8000", "10.0.0.2:8000", "10.0.0.1:8000"})

	hs := chain(1, 40)
	a.ix.RecordRouted(0, hs, 0) // 10.0.0.1 on A, id 2 on B
	out := make([]Match, 3)
	waitFor(t, "B's index holds A's routed prefix", func() bool { return g.ix.MatchPrefix(hs, out) == len(hs) })
	if out[2].Blocks != len(hs) || out[0].Blocks != 0 || out[1].Blocks != 0 {
		t.Fatalf("B matches %+v, want all 40 blocks on its endpoint 2 (10.0.0.1) only", out)
	}

	// A grown turn of the chain, routed by B to 10.0.0.1 again, where it
	// held the first 40 blocks: only the 10 new ones cross, after the last
	// block held, and A, which holds the 40, finds the whole chain.
	grown := append(hs[:len(hs):len(hs)], chain(2, 10)...)
	var sent []BlockHash
	g.peers.cfg.Transport = tap{b, func(msg []byte) {
		if bt, err := decodePeerBatch(msg); err == nil {
			sent = append(sent, bt.hashes...)
		}
	}}
	g.ix.RecordRouted(2, grown, len(hs))
	waitFor(t, "A's index holds B's grown prefix", func() bool { return a.ix.MatchPrefix(grown, out) == len(grown) })
	if !slices.Equal(sent, grown[len(hs)-1:]) {
		t.Errorf("B published blocks %v, want the last it held, then only the 10 it did not hold", sent)
	}
	a.ix.mu.RLock()
	inRuns := len(runBlocks(a.ix.mu.endpoints[0]))
	a.ix.mu.RUnlock()
	if inRuns != len(hs) {
		t.Errorf("A holds %d blocks in runs after its peer's records, want the %d it routed", inRuns, len(hs))
	}
	g.peers.cfg.Transport = b

	// A failed turn's blocks are taken back at the peer too.
	a.ix.RemoveRouted(0, grown[len(hs):])
	waitFor(t, "B forgot the failed turn's blocks", func() bool { return g.ix.MatchPrefix(grown, out) == len(hs) })

	if got := testutil.ToFloat64(a.peers.published); got != 2 {
		t.Errorf("A published %v records, want 2", got)
	}
	if got := testutil.ToFloat64(g.peers.applied); got != 2 {
		t.Errorf("B applied %v records, want 2", got)
	}
	if got := testutil.ToFloat64(g.peers.published); got != 1 {
		t.Errorf("B published %v records, want 1: what it applied is not published again", got)
	}
	if n := testutil.CollectAndCount(a.reg, "turnpike_kv_peer_record_lag_seconds"); n != 1 {
		t.Errorf("lag histogram: %d series", n)
	}
}

func TestPeersKVEventRecordsNotShared(t *testing.T) {
	b := newBus()
	a := startPeer(t, b, []string{"e1", "e2"})
	g := startPeer(t, b, []string{"e1", "e2"})
	// A record from an engine's KV events (Record) stays local; the
	// routed one after it crosses.
	a.ix.Record(0, HBM, chain(1, 8))
	a.ix.RecordRouted(1, chain(2, 8), 0)
	out := make([]Match, 2)
	waitFor(t, "B has the routed record", func() bool { return g.ix.MatchPrefix(chain(2, 8), out) == 8 })
	if n := g.ix.MatchPrefix(chain(1, 8), out); n != 0 {
		t.Fatalf("B matches %d blocks of A's KV-event record, want 0", n)
	}
}

func TestPeersDropUnknownEndpointAndOld(t *testing.T) {
	b := newBus()
	a := startPeer(t, b, []string{"e1", "only-on-a"})
	clock := time.Now()
	g := &peerGateway{ix: NewIndex(IndexOptions{})}
	var err error
	g.peers, err = NewPeers(PeersConfig{Index: g.ix, Names: []string{"e1"}, Transport: b, MaxAge: time.Second,
		Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	// Messages fed by hand: the subscription is not started.
	var recs []peerRecord
	var hashes []BlockHash
	recs = append(recs, peerRecord{endpoint: 1, at: clock, n: 4})
	hashes = append(hashes, chain(1, 4)...)
	recs = append(recs, peerRecord{endpoint: 0, at: clock.Add(-2 * time.Second), n: 4})
	hashes = append(hashes, chain(2, 4)...)
	recs = append(recs, peerRecord{endpoint: 0, at: clock, n: 4})
	hashes = append(hashes, chain(3, 4)...)
	msg, n := a.peers.encode(nil, recs, hashes)
	if n != 3 {
		t.Fatalf("encoded %d of 3 records", n)
	}
	g.peers.apply(msg)
	g.peers.apply(msg[:len(msg)-1])
	for reason, want := range map[string]float64{peerDropEndpoint: 1, peerDropOld: 1, peerDropDecode: 1} {
		if got := testutil.ToFloat64(g.peers.dropped.WithLabelValues(reason)); got != want {
			t.Errorf("dropped{%s} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(g.peers.applied); got != 1 {
		t.Errorf("applied %v, want 1", got)
	}
	out := make([]Match, 1)
	if got := g.ix.MatchPrefix(chain(3, 4), out); got != 4 {
		t.Errorf("the fresh record matches %d blocks, want 4", got)
	}
	// Its own messages a gateway skips.
	a.peers.apply(msg)
	if got := testutil.ToFloat64(a.peers.applied); got != 0 {
		t.Errorf("A applied %v of its own records", got)
	}
}

func TestPeersBacklogDrops(t *testing.T) {
	ix := NewIndex(IndexOptions{})
	p, err := NewPeers(PeersConfig{Index: ix, Names: []string{"e1"}, Transport: newBus(), MaxPending: 10})
	if err != nil {
		t.Fatal(err)
	}
	// Not started: nothing drains the buffer.
	p.routed(0, peerRecordStored, chain(1, 8))
	p.routed(0, peerRecordStored, chain(2, 8))
	if got := testutil.ToFloat64(p.dropped.WithLabelValues(peerDropBacklog)); got != 1 {
		t.Fatalf("dropped{backlog} = %v, want 1", got)
	}
}

func TestPeersEncodeSplits(t *testing.T) {
	p, err := NewPeers(PeersConfig{Index: NewIndex(IndexOptions{}), Names: []string{"e1", "e2"}, Transport: newBus()})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	const per = 50_000 // 400 KB of hashes a record
	var recs []peerRecord
	var hashes []BlockHash
	for i := range 5 {
		recs = append(recs, peerRecord{endpoint: i % 2, op: byte(i % 2), at: now, n: per})
		hashes = append(hashes, chain(i, per)...)
	}
	var got []wireRecord
	var all []BlockHash
	for len(recs) > 0 {
		msg, n := p.encode(nil, recs, hashes)
		if len(msg) > peerMaxMessage {
			t.Fatalf("message of %d bytes", len(msg))
		}
		b, err := decodePeerBatch(msg)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.recs) != n {
			t.Fatalf("decoded %d records of %d", len(b.recs), n)
		}
		got = append(got, b.recs...)
		for _, r := range b.recs {
			all = append(all, b.hashes[r.first:r.first+r.n]...)
		}
		recs, hashes = recs[n:], hashes[n*per:]
	}
	if len(got) != 5 {
		t.Fatalf("%d records in all", len(got))
	}
	for i, r := range got {
		if r.name != i%2 || int(r.op) != i%2 || r.n != per {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	for i := range 5 {
		if !slices.Equal(all[i*per:(i+1)*per], chain(i, per)) {
			t.Fatalf("record %d's hashes differ", i)
		}
	}
}

func TestNewPeersValidates(t *testing.T) {
	_, err := NewPeers(PeersConfig{Names: []string{"a", "a", ""}})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"Index required", "Transport required", `"a" given twice`, `name ""`} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func FuzzDecodePeerBatch(f *testing.F) {
	p, err := NewPeers(PeersConfig{Index: NewIndex(IndexOptions{}), Names: []string{"10.0.0.1:8000", "e2"}, Transport: newBus(), Origin: "gw-a"})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	msg, _ := p.encode(nil, []peerRecord{{endpoint: 0, at: now, n: 3}, {endpoint: 1, op: 1, at: now, n: 1}}, chain(1, 4))
	f.Add(msg)
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		b, err := decodePeerBatch(msg)
		if err != nil {
			return
		}
		for _, r := range b.recs {
			if r.name >= len(b.names) || r.first+r.n > len(b.hashes) || r.op > peerRecordAfter || (r.op == peerRecordAfter && r.n < 2) {
				t.Fatalf("record %+v out of the batch's bounds", r)
			}
		}
		// Applying what decodes never panics.
		q, err := NewPeers(PeersConfig{Index: NewIndex(IndexOptions{}), Names: []string{"10.0.0.1:8000", "e2"}, Transport: newBus()})
		if err != nil {
			t.Fatal(err)
		}
		q.apply(msg)
	})
}

// BenchmarkRecordRouted is the routing path's cost of sharing a record: a
// 2,000-block chain recorded and queued for the peers.
func BenchmarkRecordRouted(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "local"
		if shared {
			name = "shared"
		}
		b.Run(name, func(b *testing.B) {
			ix := NewIndex(IndexOptions{})
			if shared {
				p, err := NewPeers(PeersConfig{Index: ix, Names: []string{"e1", "e2"}, Transport: discardTransport{}})
				if err != nil {
					b.Fatal(err)
				}
				p.Start(context.Background())
				defer p.Close(context.Background())
			}
			hs := chain(1, 2000)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ix.RecordRouted(i%2, hs, 0)
			}
		})
	}
}

type discardTransport struct{}

func (discardTransport) Publish(context.Context, []byte) error { return nil }
func (discardTransport) Subscribe(ctx context.Context, _ func([]byte)) error {
	<-ctx.Done()
	return nil
}
