package kv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turnpike-gateway/turnpike/gossip"
	"github.com/turnpike-gateway/turnpike/internal/wait"
)

// PeerTransport carries routing records between the gateways that route
// onto one fleet: every message Publish sends reaches every subscriber,
// the sender's own included, at most once, in no promised order. Redis
// pub/sub is one (state.Broadcast).
type PeerTransport = gossip.Transport

// Defaults of PeersConfig.
const (
	DefaultPeerFlushInterval = 20 * time.Millisecond
	DefaultPeerMaxPending    = 1 << 18 // blocks: 2 MiB of hashes
	DefaultPeerMaxAge        = 10 * time.Second
	// peerMaxMessage bounds one published message; a flush of more is
	// split.
	peerMaxMessage = 1 << 20
)

// PeersConfig configures Peers.
type PeersConfig struct {
	// Index is the gateway's index: records of its routing are published,
	// records of its peers' applied to it. Required.
	Index *Index
	// Names names endpoint id i as Names[i] on the wire: a name every
	// gateway gives the same engine (the pools' host:port). Required.
	Names []string
	// Transport carries the messages. Required.
	Transport PeerTransport
	// Origin tells this gateway's messages from its peers'. Empty: random.
	Origin string
	// FlushInterval is how long a record waits to be published with the
	// ones that follow it. Default DefaultPeerFlushInterval.
	FlushInterval time.Duration
	// MaxPending bounds the blocks waiting to be published; records past
	// it are dropped (counted). Default DefaultPeerMaxPending.
	MaxPending int
	// MaxAge drops a peer's record older than this when it arrives: the
	// index has learnt more since (from KV events). Default
	// DefaultPeerMaxAge.
	MaxAge time.Duration
	// Registerer takes the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger reports transport failures; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Peers shares the index's speculative records, those of prompts this
// gateway routed (Index.RecordRouted, Index.RemoveRouted), with the other
// gateways on the same fleet, and applies theirs to the index, so that a
// turn that lands on another gateway than its previous one still finds
// its prefix before the engine's KV events tell. Records that come from
// engines' KV events are not shared: every gateway subscribes to the
// engines itself. Nor are the records applied from peers published again.
//
// Concurrency: the routing path only copies a record into the pending
// buffer under a short mutex; one goroutine publishes, one applies what
// arrives. New starts nothing; Start starts both, Close stops and joins
// them.
type Peers struct {
	cfg    PeersConfig
	ids    map[string]int
	origin []byte
	notify chan struct{}

	mu struct {
		sync.Mutex
		// protects the fields below: records waiting to be published,
		// their hashes end to end in hashes.
		recs   []peerRecord
		hashes []BlockHash
	}

	published, applied prometheus.Counter
	dropped            *prometheus.CounterVec
	lag                prometheus.Histogram
	pendingBlocks      atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Reasons of turnpike_kv_peer_records_dropped_total.
const (
	peerDropBacklog  = "backlog"          // MaxPending reached
	peerDropPublish  = "publish_error"    // the transport refused the message
	peerDropDecode   = "decode_error"     // a message that is not a batch of records
	peerDropEndpoint = "unknown_endpoint" // names an engine this gateway does not route to
	peerDropOld      = "old"              // older than MaxAge on arrival
	// Ops of a record: blocks stored (their parent unknown), removed, a
	// whole chain stored (root first), or stored past their parent (the
	// first hash, held already).
	peerRecordStored  = 0
	peerRecordRemoved = 1
	peerRecordChain   = 2
	peerRecordAfter   = 3
)

// peerRecord is one routing record: endpoint holds (or no longer holds)
// the chain of n hashes, as of at.
type peerRecord struct {
	endpoint int
	op       byte
	at       time.Time
	n        int
}

// NewPeers validates cfg and builds a Peers; nothing runs until Start.
func NewPeers(cfg PeersConfig) (*Peers, error) {
	var errs []error
	if cfg.Index == nil {
		errs = append(errs, errors.New("kv: peers: Index required"))
	}
	if cfg.Transport == nil {
		errs = append(errs, errors.New("kv: peers: Transport required"))
	}
	ids := make(map[string]int, len(cfg.Names))
	for i, n := range cfg.Names {
		if n == "" || len(n) > 255 {
			errs = append(errs, fmt.Errorf("kv: peers: endpoint %d: name %q, want 1 to 255 bytes", i, n))
		}
		if _, dup := ids[n]; dup {
			errs = append(errs, fmt.Errorf("kv: peers: endpoint name %q given twice", n))
		}
		ids[n] = i
	}
	if len(cfg.Origin) > 255 {
		errs = append(errs, errors.New("kv: peers: Origin longer than 255 bytes"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Origin == "" {
		cfg.Origin = rand.Text()
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = DefaultPeerFlushInterval
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultPeerMaxPending
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultPeerMaxAge
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Peers{cfg: cfg, ids: ids, origin: []byte(cfg.Origin), notify: make(chan struct{}, 1)}
	p.published = prometheus.NewCounter(prometheus.CounterOpts{Name: "turnpike_kv_peer_records_published_total",
		Help: "Routing records (a prompt's block chain on an endpoint) this gateway published to the other gateways."})
	p.applied = prometheus.NewCounter(prometheus.CounterOpts{Name: "turnpike_kv_peer_records_applied_total",
		Help: "Routing records of other gateways applied to this gateway's KV index."})
	p.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "turnpike_kv_peer_records_dropped_total",
		Help: "Routing records not published (backlog, publish_error) or not applied (decode_error, unknown_endpoint, old)."}, []string{"reason"})
	for _, r := range []string{peerDropBacklog, peerDropPublish, peerDropDecode, peerDropEndpoint, peerDropOld} {
		p.dropped.WithLabelValues(r)
	}
	p.lag = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "turnpike_kv_peer_record_lag_seconds",
		Help:    "Time from another gateway's routing of a prompt to its record's arrival here.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10}})
	if r := cfg.Registerer; r != nil {
		pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "turnpike_kv_peer_pending_blocks",
			Help: "Block hashes of routing records waiting to be published."}, func() float64 { return float64(p.pendingBlocks.Load()) })
		for _, c := range []prometheus.Collector{p.published, p.applied, p.dropped, p.lag, pending} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("kv: peers: %w", err)
			}
		}
	}
	return p, nil
}

// Start connects p to its index and starts publishing and applying until
// Close, whatever becomes of ctx.
func (p *Peers) Start(ctx context.Context) error {
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	p.cfg.Index.peers.Store(p)
	p.wg.Add(2)
	go p.publishLoop(ctx)
	go p.subscribeLoop(ctx)
	return nil
}

// Close stops sharing, publishes what is pending and joins the
// goroutines, waiting for them up to ctx.
func (p *Peers) Close(ctx context.Context) error {
	if p.cancel == nil {
		return nil
	}
	p.cfg.Index.peers.CompareAndSwap(p, nil)
	p.cancel()
	if err := wait.Group(ctx, &p.wg); err != nil {
		return fmt.Errorf("kv: peers: close: %w", err)
	}
	p.cancel = nil
	return nil
}

// routed queues a record of this gateway's routing. It copies hashes.
func (p *Peers) routed(endpoint int, op byte, hashes []BlockHash) {
	if len(hashes) == 0 || endpoint < 0 || endpoint >= len(p.cfg.Names) {
		return
	}
	now := p.cfg.Now()
	p.mu.Lock()
	if len(p.mu.hashes)+len(hashes) > p.cfg.MaxPending {
		p.mu.Unlock()
		p.dropped.WithLabelValues(peerDropBacklog).Inc()
		return
	}
	p.mu.recs = append(p.mu.recs, peerRecord{endpoint: endpoint, op: op, at: now, n: len(hashes)})
	p.mu.hashes = append(p.mu.hashes, hashes...)
	p.pendingBlocks.Store(int64(len(p.mu.hashes)))
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *Peers) publishLoop(ctx context.Context) {
	defer p.wg.Done()
	var (
		recs   []peerRecord
		hashes []BlockHash
		msg    []byte
	)
	flush := func(ctx context.Context) {
		// The buffers trade places with the pending ones, so that both
		// keep their capacity and routing appends without allocating.
		p.mu.Lock()
		recs, p.mu.recs = p.mu.recs, recs[:0]
		hashes, p.mu.hashes = p.mu.hashes, hashes[:0]
		p.pendingBlocks.Store(0)
		p.mu.Unlock()
		for r, h := 0, 0; r < len(recs); {
			var n int
			msg, n = p.encode(msg[:0], recs[r:], hashes[h:])
			if err := p.cfg.Transport.Publish(ctx, msg); err != nil {
				p.dropped.WithLabelValues(peerDropPublish).Add(float64(n))
				if ctx.Err() == nil {
					p.cfg.Logger.Warn("kv: routing records not published to other gateways", "records", n, "err", err)
				}
			} else {
				p.published.Add(float64(n))
			}
			for _, rec := range recs[r : r+n] {
				h += rec.n
			}
			r += n
		}
	}
	for {
		select {
		case <-ctx.Done():
			// What was routed before Close still reaches the peers.
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			flush(final)
			cancel()
			return
		case <-p.notify:
		}
		// Wait a little for the records that follow, then send them all.
		t := time.NewTimer(p.cfg.FlushInterval)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		flush(ctx)
	}
}

func (p *Peers) subscribeLoop(ctx context.Context) {
	defer p.wg.Done()
	gossip.Follow(ctx, p.cfg.Transport, p.apply, func(err error) {
		p.cfg.Logger.Warn("kv: subscription to other gateways' routing records lost; retrying", "err", err)
	})
}

// apply applies a message of a peer to the index; this gateway's own are
// skipped.
func (p *Peers) apply(msg []byte) {
	b, err := decodePeerBatch(msg)
	if err != nil {
		p.dropped.WithLabelValues(peerDropDecode).Inc()
		return
	}
	if string(b.origin) == string(p.origin) {
		return
	}
	now := p.cfg.Now()
	ix := p.cfg.Index
	for i := range b.recs {
		r := &b.recs[i]
		ep, ok := p.ids[string(b.names[r.name])]
		if !ok {
			p.dropped.WithLabelValues(peerDropEndpoint).Inc()
			continue
		}
		age := now.Sub(r.at)
		if age > p.cfg.MaxAge {
			p.dropped.WithLabelValues(peerDropOld).Inc()
			continue
		}
		p.lag.Observe(max(age, 0).Seconds())
		hashes := b.hashes[r.first : r.first+r.n]
		switch r.op {
		case peerRecordRemoved:
			ix.Remove(ep, HBM, hashes)
		case peerRecordChain:
			ix.RecordChain(ep, hashes)
		case peerRecordAfter:
			ix.RecordAfter(ep, hashes[0], hashes[1:])
		default:
			ix.recordPeer(ep, hashes)
		}
		p.applied.Inc()
	}
}

// The wire format of a batch of records, version 1, little-endian:
//
//	version   byte (1)
//	origin    uvarint length, bytes
//	sent      uvarint: Unix milliseconds
//	names     uvarint count, then each: uvarint length, bytes
//	records   uvarint count, then each:
//	            name   uvarint index into names
//	            op     byte: 0 stored, 1 removed, 2 a whole chain stored,
//	                   3 stored past the first hash (held already)
//	            age    uvarint: milliseconds before sent
//	            n      uvarint, then n block hashes of 8 bytes
const peerWireVersion = 1

// encode appends to dst a message of the leading records of recs (with
// their hashes from hashes) that fit in peerMaxMessage, at least one, and
// says how many it took.
func (p *Peers) encode(dst []byte, recs []peerRecord, hashes []BlockHash) ([]byte, int) {
	sent := p.cfg.Now()
	// The names table lists every endpoint: a few bytes each, and no
	// second pass over the records.
	dst = append(dst, peerWireVersion)
	dst = binary.AppendUvarint(dst, uint64(len(p.origin)))
	dst = append(dst, p.origin...)
	dst = binary.AppendUvarint(dst, uint64(max(sent.UnixMilli(), 0)))
	dst = binary.AppendUvarint(dst, uint64(len(p.cfg.Names)))
	for _, n := range p.cfg.Names {
		dst = binary.AppendUvarint(dst, uint64(len(n)))
		dst = append(dst, n...)
	}
	take, size := 0, len(dst)
	for _, r := range recs {
		size += 4*binary.MaxVarintLen64 + 8*r.n
		if take > 0 && size > peerMaxMessage {
			break
		}
		take++
	}
	dst = binary.AppendUvarint(dst, uint64(take))
	off := 0
	for _, r := range recs[:take] {
		dst = binary.AppendUvarint(dst, uint64(r.endpoint))
		dst = append(dst, r.op)
		dst = binary.AppendUvarint(dst, uint64(max(sent.Sub(r.at).Milliseconds(), 0)))
		dst = binary.AppendUvarint(dst, uint64(r.n))
		for _, h := range hashes[off : off+r.n] {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(h))
		}
		off += r.n
	}
	return dst, take
}

// peerBatch is a decoded message.
type peerBatch struct {
	origin []byte
	names  [][]byte
	recs   []wireRecord
	hashes []BlockHash
}

type wireRecord struct {
	name     int
	op       byte
	at       time.Time
	first, n int
}

var errPeerWire = errors.New("kv: malformed routing record batch")

// decodePeerBatch parses a message of another gateway: outside input,
// checked against every length it claims.
func decodePeerBatch(msg []byte) (*peerBatch, error) {
	r := gossip.NewReader(msg)
	if v := r.Byte(); v != peerWireVersion {
		return nil, fmt.Errorf("%w: version %d", errPeerWire, v)
	}
	b := &peerBatch{origin: r.Bytes()}
	sentMS := r.Uvarint()
	if sentMS > 1<<53 {
		r.Fail()
	}
	sent := time.UnixMilli(int64(sentMS))
	nNames := r.Count(1)
	b.names = make([][]byte, 0, nNames)
	for range nNames {
		b.names = append(b.names, r.Bytes())
	}
	nRecs := r.Count(4)
	b.recs = make([]wireRecord, 0, nRecs)
	for range nRecs {
		name := r.Uvarint()
		op := r.Byte()
		age := r.Uvarint()
		n := r.Count(8)
		if !r.OK() {
			break
		}
		if name >= uint64(len(b.names)) || op > peerRecordAfter || (op == peerRecordAfter && n < 2) || age > 1<<40 {
			r.Fail()
			break
		}
		first := len(b.hashes)
		for range n {
			b.hashes = append(b.hashes, BlockHash(binary.LittleEndian.Uint64(r.Take(8))))
		}
		b.recs = append(b.recs, wireRecord{name: int(name), op: op,
			at: sent.Add(-time.Duration(age) * time.Millisecond), first: first, n: n})
	}
	if !r.OK() || r.Len() != 0 {
		return nil, errPeerWire
	}
	return b, nil
}
