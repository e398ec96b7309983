package gossip

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Transport carries reports: every message Publish sends reaches every
// subscriber, the sender's own included, at most once, in no promised
// order.
type Transport interface {
	// Publish sends msg to every subscriber.
	Publish(ctx context.Context, msg []byte) error
	// Subscribe calls fn with each message until ctx ends, from one
	// goroutine; msg is valid only during the call. It returns when ctx
	// ends, or with the error that broke the subscription.
	Subscribe(ctx context.Context, fn func(msg []byte)) error
}

// Codec is what an exchange reports and how it reads its peers' reports.
type Codec[T any] interface {
	// Report appends this gateway's snapshot to dst; empty says there is
	// nothing to report (peers count it as nothing).
	Report(dst []byte) (body []byte, empty bool)
	// Decode reads a peer's snapshot; body is valid only during the call.
	Decode(body []byte) (T, error)
	// Peers is called, under the exchange's lock, with the snapshots of
	// every peer heard from within MaxAge whenever that set changes.
	Peers(snapshots []T)
}

// Defaults of Config.
const (
	DefaultInterval = 100 * time.Millisecond
	DefaultMaxAge   = time.Second
	// MaxPeers bounds the gateways an exchange keeps snapshots of; reports
	// from more are dropped.
	MaxPeers = 256
)

// Config configures an Exchange.
type Config struct {
	// Name names the exchange in its metrics' exchange label and in logs,
	// and tells its reports from other exchanges' on a shared channel.
	// Required; at most 64 bytes.
	Name string
	// Transport carries the reports. Required.
	Transport Transport
	// Origin tells this gateway's reports from its peers'. Empty: random.
	Origin string
	// Interval is how often the gateway reports. Default DefaultInterval.
	Interval time.Duration
	// MaxAge forgets a peer not heard from for this long. At least twice
	// Interval; default DefaultMaxAge.
	MaxAge time.Duration
	// Metrics, when set, counts reports by exchange; see NewMetrics.
	Metrics *Metrics
	// Logger reports transport failures; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Metrics counts the reports of every exchange of a gateway.
type Metrics struct {
	published, applied, dropped *prometheus.CounterVec
	peers                       *prometheus.GaugeVec
}

// Reasons of turnpike_gossip_reports_dropped_total.
const (
	dropPublish = "publish_error" // the transport refused the report
	dropDecode  = "decode_error"  // a message that is not a report
	dropOld     = "out_of_order"  // older than the peer's last report
	dropPeers   = "too_many_peers"
)

// NewMetrics registers the exchanges' metrics with r.
func NewMetrics(r prometheus.Registerer) (*Metrics, error) {
	m := newMetrics()
	for _, c := range []prometheus.Collector{m.published, m.applied, m.dropped, m.peers} {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("gossip: %w", err)
		}
	}
	return m, nil
}

// newMetrics builds the metrics unregistered.
func newMetrics() *Metrics {
	return &Metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "turnpike_gossip_reports_published_total",
			Help: "Reports this gateway published to the other gateways, by exchange."}, []string{"exchange"}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "turnpike_gossip_reports_applied_total",
			Help: "Reports of other gateways applied here, by exchange."}, []string{"exchange"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "turnpike_gossip_reports_dropped_total",
			Help: "Reports not published (publish_error) or not applied (decode_error, out_of_order, too_many_peers), by exchange."}, []string{"exchange", "reason"}),
		peers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "turnpike_gossip_peers",
			Help: "Other gateways heard from within the exchange's max age, by exchange."}, []string{"exchange"}),
	}
}

// Exchange reports this gateway's snapshot every Interval and keeps its
// peers'. Concurrency: one goroutine reports, one applies what arrives;
// the codec's Peers runs under the exchange's lock. New starts nothing;
// Start starts both, Close stops and joins them.
type Exchange[T any] struct {
	cfg    Config
	codec  Codec[T]
	origin []byte

	mu struct {
		sync.Mutex
		peers map[string]*peer[T]
		// list is Peers' argument, reused.
		list []T
	}

	published, applied prometheus.Counter
	dropped            *prometheus.CounterVec // by exchange and reason
	peersGauge         prometheus.Gauge

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type peer[T any] struct {
	sent, heard time.Time
	snapshot    T
}

// New validates cfg and builds an exchange; nothing runs until Start.
func New[T any](cfg Config, codec Codec[T]) (*Exchange[T], error) {
	var errs []error
	if cfg.Name == "" || len(cfg.Name) > 64 {
		errs = append(errs, fmt.Errorf("gossip: Name %q, want 1 to 64 bytes", cfg.Name))
	}
	if cfg.Transport == nil {
		errs = append(errs, errors.New("gossip: Transport required"))
	}
	if codec == nil {
		errs = append(errs, errors.New("gossip: codec required"))
	}
	if len(cfg.Origin) > 255 {
		errs = append(errs, errors.New("gossip: Origin longer than 255 bytes"))
	}
	if cfg.Interval < 0 || cfg.MaxAge < 0 {
		errs = append(errs, errors.New("gossip: negative Interval or MaxAge"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Origin == "" {
		cfg.Origin = rand.Text()
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	cfg.MaxAge = max(cfg.MaxAge, 2*cfg.Interval)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	x := &Exchange[T]{cfg: cfg, codec: codec, origin: []byte(cfg.Origin)}
	x.mu.peers = map[string]*peer[T]{}
	m := cfg.Metrics
	if m == nil {
		m = newMetrics()
	}
	x.published = m.published.WithLabelValues(cfg.Name)
	x.applied = m.applied.WithLabelValues(cfg.Name)
	x.peersGauge = m.peers.WithLabelValues(cfg.Name)
	x.dropped = m.dropped
	for _, r := range []string{dropPublish, dropDecode, dropOld, dropPeers} {
		m.dropped.WithLabelValues(cfg.Name, r)
	}
	return x, nil
}

// drop counts a report dropped for reason.
func (x *Exchange[T]) drop(reason string) { x.dropped.WithLabelValues(x.cfg.Name, reason).Inc() }

// Fresh is how many peers were heard from within MaxAge, as of the last
// change.
func (x *Exchange[T]) Fresh() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.mu.peers)
}

// Start starts reporting and applying until Close, whatever becomes of
// ctx.
func (x *Exchange[T]) Start(ctx context.Context) error {
	ctx, x.cancel = context.WithCancel(context.WithoutCancel(ctx))
	x.wg.Add(2)
	go x.publishLoop(ctx)
	go x.subscribeLoop(ctx)
	return nil
}

// Close stops the exchange: it tells the peers this gateway has nothing
// to report any more, forgets theirs and joins its goroutines, waiting
// for them up to ctx.
func (x *Exchange[T]) Close(ctx context.Context) error {
	if x.cancel == nil {
		return nil
	}
	x.cancel()
	if err := wait(ctx, &x.wg); err != nil {
		return fmt.Errorf("gossip: %s: close: %w", x.cfg.Name, err)
	}
	x.cancel = nil
	x.mu.Lock()
	clear(x.mu.peers)
	x.changedLocked()
	x.mu.Unlock()
	return nil
}

// wait waits for wg, up to ctx.
func wait(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (x *Exchange[T]) publishLoop(ctx context.Context) {
	defer x.wg.Done()
	var (
		msg      []byte
		wasEmpty bool
	)
	publish := func(ctx context.Context, final bool) {
		var empty bool
		msg, empty = x.frame(msg[:0], x.cfg.Now(), final)
		if empty && wasEmpty {
			return
		}
		if err := x.cfg.Transport.Publish(ctx, msg); err != nil {
			x.drop(dropPublish)
			if ctx.Err() == nil {
				x.cfg.Logger.Warn("gossip: report not published to other gateways", "exchange", x.cfg.Name, "err", err)
			}
			return
		}
		x.published.Inc()
		wasEmpty = empty
	}
	t := time.NewTicker(x.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// The peers stop counting this gateway at once, not after
			// MaxAge.
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			wasEmpty = false
			publish(final, true)
			cancel()
			return
		case <-t.C:
		}
		publish(ctx, false)
		x.mu.Lock()
		if x.expireLocked(x.cfg.Now()) {
			x.changedLocked()
		}
		x.mu.Unlock()
	}
}

func (x *Exchange[T]) subscribeLoop(ctx context.Context) {
	defer x.wg.Done()
	Follow(ctx, x.cfg.Transport, x.apply, func(err error) {
		x.cfg.Logger.Warn("gossip: subscription to other gateways' reports lost; retrying", "exchange", x.cfg.Name, "err", err)
	})
}

// Follow calls fn with each message t carries until ctx ends, as
// Transport.Subscribe does, and subscribes again a second after each
// subscription that breaks, telling lost why.
func Follow(ctx context.Context, t Transport, fn func(msg []byte), lost func(err error)) {
	for ctx.Err() == nil {
		err := t.Subscribe(ctx, fn)
		if ctx.Err() != nil {
			return
		}
		lost(err)
		wait := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
}

// Wire format of a report, integers unsigned varints unless said
// otherwise:
//
//	'G' 1          magic and version
//	len name       the exchange
//	len origin     the reporting gateway
//	sent           Unix nanoseconds, signed varint
//	flags          1: empty (nothing to report)
//	body           the codec's, to the end of the message
const (
	magic   = 'G'
	version = 1
	// flagEmpty marks a report with nothing in it.
	flagEmpty = 1
)

// frame appends this gateway's report to dst. A final report is empty:
// the gateway is stopping.
func (x *Exchange[T]) frame(dst []byte, now time.Time, final bool) (msg []byte, empty bool) {
	dst = append(dst, magic, version)
	dst = binary.AppendUvarint(dst, uint64(len(x.cfg.Name)))
	dst = append(dst, x.cfg.Name...)
	dst = binary.AppendUvarint(dst, uint64(len(x.origin)))
	dst = append(dst, x.origin...)
	dst = binary.AppendVarint(dst, now.UnixNano())
	if final {
		return append(dst, flagEmpty), true
	}
	at := len(dst)
	dst = append(dst, 0)
	dst, empty = x.codec.Report(dst)
	if empty {
		dst = append(dst[:at], flagEmpty)
	}
	return dst, empty
}

// header is a report's frame, decoded; origin and body alias the message.
type header struct {
	name, origin, body []byte
	sent               int64
	empty              bool
}

// errBadReport is what decodeHeader says of a message it cannot read.
var errBadReport = errors.New("gossip: malformed report")

func decodeHeader(msg []byte) (header, error) {
	r := NewReader(msg)
	if r.Byte() != magic || r.Byte() != version {
		return header{}, errBadReport
	}
	h := header{name: r.Bytes(), origin: r.Bytes(), sent: r.Varint()}
	flags := r.Byte()
	h.empty = flags&flagEmpty != 0
	h.body = r.Rest()
	if !r.OK() || len(h.name) > 255 || len(h.origin) > 255 || flags&^flagEmpty != 0 || h.empty && len(h.body) != 0 {
		return header{}, errBadReport
	}
	return h, nil
}

// apply takes a peer's report in place of its last one; this gateway's
// own reports, and other exchanges', are skipped.
func (x *Exchange[T]) apply(msg []byte) {
	h, err := decodeHeader(msg)
	if err != nil {
		x.drop(dropDecode)
		return
	}
	if string(h.name) != x.cfg.Name || string(h.origin) == string(x.origin) {
		return
	}
	var snap T
	if !h.empty {
		if snap, err = x.codec.Decode(h.body); err != nil {
			x.drop(dropDecode)
			return
		}
	}
	now := x.cfg.Now()
	sent := time.Unix(0, h.sent)
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.mu.peers[string(h.origin)]
	switch {
	case p != nil && sent.Before(p.sent):
		x.drop(dropOld)
		return
	case h.empty:
		// Nothing to add; a peer that had something has stopped or
		// finished.
		x.applied.Inc()
		if p != nil {
			delete(x.mu.peers, string(h.origin))
			x.expireLocked(now)
			x.changedLocked()
		}
		return
	case p == nil && len(x.mu.peers) >= MaxPeers:
		x.drop(dropPeers)
		return
	case p == nil:
		p = &peer[T]{}
		x.mu.peers[string(h.origin)] = p
	}
	p.sent, p.heard, p.snapshot = sent, now, snap
	x.applied.Inc()
	x.expireLocked(now)
	x.changedLocked()
}

// expireLocked forgets the peers not heard from within MaxAge, and says
// whether it forgot any.
func (x *Exchange[T]) expireLocked(now time.Time) bool {
	gone := false
	for o, p := range x.mu.peers {
		if now.Sub(p.heard) > x.cfg.MaxAge {
			delete(x.mu.peers, o)
			gone = true
		}
	}
	return gone
}

// changedLocked hands the codec the peers' snapshots.
func (x *Exchange[T]) changedLocked() {
	x.peersGauge.Set(float64(len(x.mu.peers)))
	list := x.mu.list[:0]
	for _, p := range x.mu.peers {
		list = append(list, p.snapshot)
	}
	x.codec.Peers(list)
	clear(list)
	x.mu.list = list[:0]
}

// Loopback is an in-process Transport: a message published reaches every
// subscription live at that moment, as Redis pub/sub does. For exchanges
// of gateways in one process, and for tests. The zero value is ready.
type Loopback struct {
	mu   sync.Mutex
	subs map[chan []byte]struct{}
}

// Publish implements Transport. A subscriber that has fallen 256
// messages behind misses this one, as a slow Redis subscriber would.
func (l *Loopback) Publish(_ context.Context, msg []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs {
		select {
		case ch <- bytes.Clone(msg):
		default:
		}
	}
	return nil
}

// Subscribers is how many subscriptions are live: a subscriber hears what
// is published once this counts it.
func (l *Loopback) Subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs)
}

// Subscribe implements Transport.
func (l *Loopback) Subscribe(ctx context.Context, fn func([]byte)) error {
	ch := make(chan []byte, 256)
	l.mu.Lock()
	if l.subs == nil {
		l.subs = map[chan []byte]struct{}{}
	}
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			fn(m)
		}
	}
}
