package kv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/turnpike-gateway/turnpike/internal/lru"
)

// Subscriber defaults.
const (
	DefaultRecoverAfter = 30 * time.Second
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 5 * time.Second
	DefaultDialTimeout  = 5 * time.Second
	DefaultReadInterval = 20 * time.Millisecond
)

// SubscriberConfig configures the KV event subscription of one endpoint.
type SubscriberConfig struct {
	// Endpoint is the endpoint's id in the Index.
	Endpoint int
	// Addr is the ZMQ address, e.g. "tcp://10.0.0.7:5557". Required. Each
	// data-parallel rank of an engine publishes on its own address and is an
	// endpoint of its own, so a batch's DataParallelRank is not consulted.
	Addr string
	// Bind makes the subscriber listen on Addr for a publisher that connects
	// out. False (the default, as vLLM binds its PUB socket) dials Addr.
	Bind bool
	// Topic is the topic prefix subscribed to. Empty (vLLM's default topic)
	// means every message.
	Topic string
	// Model seeds the gateway's hash chain, as Prompt.Model does. Required.
	Model string
	// Hasher hashes the token ids of stored blocks; only its BlockSize
	// matters here, and it must be the one that hashes prompts. Nil means
	// the zero Hasher.
	Hasher *Hasher
	// RecoverAfter is how long events must arrive without a gap before an
	// endpoint marked stale is trusted again. Zero means DefaultRecoverAfter.
	RecoverAfter time.Duration
	// MinBackoff and MaxBackoff bound the wait before reconnecting after an
	// error; it doubles on each failure. Zero means DefaultMinBackoff and
	// DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// DialTimeout bounds one connection attempt. Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// ReadInterval spaces the reads of the events: while events keep
	// coming, the connection is read once an interval (intervals cut from
	// one clock for every subscriber), each read taking every batch that
	// came meanwhile, and the batches do not wake the gateway one by one
	// (netwake); a connection quiet at an interval's end is polled at the
	// next four ends, with the others, and only then is its next batch
	// read as it comes. An event waits at most this long. Zero means
	// DefaultReadInterval; negative: every batch read as it comes.
	ReadInterval time.Duration
	// Logger receives connection errors (warn) and skipped events (debug).
	// Nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem of c at once.
func (c *SubscriberConfig) Validate() error {
	var errs []error
	if c.Endpoint < 0 || c.Endpoint >= MaxEndpoints {
		errs = append(errs, fmt.Errorf("kv: endpoint id %d out of range [0, %d)", c.Endpoint, MaxEndpoints))
	}
	if !strings.Contains(c.Addr, "://") {
		errs = append(errs, fmt.Errorf("kv: subscriber address %q is not a ZMQ address (tcp://host:port)", c.Addr))
	}
	if c.Model == "" {
		errs = append(errs, errors.New("kv: subscriber needs the model name"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RecoverAfter", c.RecoverAfter}, {"MinBackoff", c.MinBackoff}, {"MaxBackoff", c.MaxBackoff}, {"DialTimeout", c.DialTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("kv: %s is negative: %v", d.name, d.v))
		}
	}
	if c.MinBackoff > 0 && c.MaxBackoff > 0 && c.MinBackoff > c.MaxBackoff {
		errs = append(errs, fmt.Errorf("kv: MinBackoff %v exceeds MaxBackoff %v", c.MinBackoff, c.MaxBackoff))
	}
	return errors.Join(errs...)
}

func (c *SubscriberConfig) ensureDefaults() {
	if c.Hasher == nil {
		c.Hasher = &Hasher{}
	}
	if c.RecoverAfter == 0 {
		c.RecoverAfter = DefaultRecoverAfter
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ReadInterval == 0 {
		c.ReadInterval = DefaultReadInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Subscriber feeds one endpoint's entries in an Index from the engine's KV
// events. Create it with NewSubscriber; Start subscribes, Close ends the
// subscription.
type Subscriber struct {
	cfg SubscriberConfig
	ix  *Index
	log *slog.Logger

	stats subscriberCounters

	// stop ends the goroutine Start starts, which closes done.
	stop context.CancelFunc
	done chan struct{}

	// Owned by the goroutine Start starts.
	haveSeq    bool
	lastSeq    uint64
	stale      bool
	staleSince time.Time
	mapping    engineMap
	chain      []BlockHash
	gone       []BlockHash
	now        func() time.Time
}

type subscriberCounters struct {
	batches      atomic.Uint64
	events       atomic.Uint64
	skipped      atomic.Uint64
	gaps         atomic.Uint64
	decodeErrors atomic.Uint64
	reconnects   atomic.Uint64
	connected    atomic.Bool
}

// SubscriberStats are a subscriber's counters, for metrics.
type SubscriberStats struct {
	Batches      uint64 // batches applied
	Events       uint64 // events applied
	Skipped      uint64 // events that could not be mapped (unknown parent or medium, other block size)
	Gaps         uint64 // sequence gaps seen, each marking the endpoint stale
	DecodeErrors uint64 // messages that could not be decoded
	Reconnects   uint64 // connections lost or failed
	Connected    bool   // a socket is open (a dialled one has connected)
}

// NewSubscriber returns a subscriber feeding ix from cfg.Addr.
func NewSubscriber(ix *Index, cfg SubscriberConfig) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ensureDefaults()
	s := &Subscriber{
		cfg: cfg,
		ix:  ix,
		log: cfg.Logger.With("endpoint", cfg.Endpoint, "addr", cfg.Addr),
		now: time.Now,
	}
	s.mapping.init()
	return s, nil
}

// Stats returns the subscriber's counters; it is safe to call while the
// subscription runs.
func (s *Subscriber) Stats() SubscriberStats {
	return SubscriberStats{
		Batches:      s.stats.batches.Load(),
		Events:       s.stats.events.Load(),
		Skipped:      s.stats.skipped.Load(),
		Gaps:         s.stats.gaps.Load(),
		DecodeErrors: s.stats.decodeErrors.Load(),
		Reconnects:   s.stats.reconnects.Load(),
		Connected:    s.stats.connected.Load(),
	}
}

// Start subscribes: a goroutine receives and applies events until Close,
// whatever becomes of ctx. A lost connection is re-established after a
// backoff; an undecodable message is logged and counted, and marks the
// endpoint stale as a gap would. It is called once.
func (s *Subscriber) Start(ctx context.Context) error {
	if s.done != nil {
		return errors.New("kv: subscriber already started")
	}
	ctx, s.stop = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
	return nil
}

// Close ends the subscription and waits, up to ctx, for its goroutine: it
// ends as soon as its socket sees its context done.
func (s *Subscriber) Close(ctx context.Context) error {
	if s.done == nil {
		return nil
	}
	s.stop()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kv: subscriber close: %w", ctx.Err())
	}
}

// run receives and applies events until ctx ends.
func (s *Subscriber) run(ctx context.Context) {
	backoff := s.cfg.MinBackoff
	for {
		received, err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		s.stats.reconnects.Add(1)
		if received {
			backoff = s.cfg.MinBackoff
		}
		s.log.Warn("kv: event subscription interrupted", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}

// session opens one socket and receives on it until it fails. received
// reports whether any message arrived, so that the backoff starts over.
func (s *Subscriber) session(ctx context.Context) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sock := zmq4.NewSub(context.WithValue(ctx, readIntervalKey{}, s.cfg.ReadInterval),
		zmq4.WithDialerMaxRetries(0), // run owns retrying, with backoff
		zmq4.WithDialerTimeout(s.cfg.DialTimeout),
		zmq4.WithLogger(slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)),
	)
	defer sock.Close()
	defer s.stats.connected.Store(false)
	if err := sock.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		return false, err
	}
	if s.cfg.Bind {
		err = sock.Listen(zmqAddr(s.cfg.Addr))
	} else {
		err = sock.Dial(zmqAddr(s.cfg.Addr))
	}
	if err != nil {
		return false, err
	}
	s.stats.connected.Store(true)
	for {
		msg, err := sock.Recv()
		if err != nil {
			return received, err
		}
		received = true
		s.handle(ctx, msg.Frames)
	}
}

// handle applies one multipart message: topic, sequence number, batch.
func (s *Subscriber) handle(ctx context.Context, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.stats.decodeErrors.Add(1)
		s.log.Warn("kv: KV event message is not [topic, seq, batch]", "frames", len(frames))
		s.markStale()
		return
	}
	seq := binary.BigEndian.Uint64(frames[1])
	s.checkSeq(seq)
	b, err := DecodeBatch(frames[2])
	if err != nil {
		s.stats.decodeErrors.Add(1)
		s.log.Warn("kv: dropped KV event batch", "seq", seq, "err", err)
		s.markStale()
		return
	}
	s.apply(ctx, &b)
}

// checkSeq marks the endpoint stale when seq does not follow the last one.
// The publisher numbers from zero, so a first message numbered otherwise
// means events were missed before the subscriber joined, and a restarted
// publisher shows as a step back.
func (s *Subscriber) checkSeq(seq uint64) {
	gap := seq != 0
	if s.haveSeq {
		gap = seq != s.lastSeq+1
	}
	s.haveSeq, s.lastSeq = true, seq
	if gap {
		s.stats.gaps.Add(1)
		s.markStale()
		return
	}
	if s.stale && s.now().Sub(s.staleSince) >= s.cfg.RecoverAfter {
		s.setStale(false)
	}
}

func (s *Subscriber) markStale() {
	s.staleSince = s.now()
	s.setStale(true)
}

func (s *Subscriber) setStale(stale bool) {
	if s.stale != stale {
		s.log.Info("kv: endpoint index stale", "stale", stale)
	}
	s.stale = stale
	s.ix.SetStale(s.cfg.Endpoint, stale)
}

// apply folds a batch into the index.
func (s *Subscriber) apply(ctx context.Context, b *EventBatch) {
	s.stats.batches.Add(1)
	// The mapping holds no more engine hashes than the endpoint's tiers
	// hold blocks: HBM's capacity, and each other tier's once it holds
	// any. A tier the engine never stores to keeps the index's default
	// capacity, no bound on this engine's blocks: counted, it let the
	// mapping of an engine without offload grow to four times its cache.
	st := s.ix.EndpointStats(s.cfg.Endpoint)
	limit := st.Capacity[HBM]
	for t := HBM + 1; t < NumTiers; t++ {
		if st.Blocks[t] > 0 {
			limit += st.Capacity[t]
		}
	}
	if limit == 0 {
		limit = s.ix.defaultCapacity
	}
	for i := range b.Events {
		ev := &b.Events[i]
		if reason := s.applyEvent(ev, limit); reason != "" {
			s.stats.skipped.Add(1)
			if s.log.Enabled(ctx, slog.LevelDebug) {
				s.log.Debug("kv: skipped KV event", "kind", ev.Kind, "reason", reason)
			}
			continue
		}
		s.stats.events.Add(1)
	}
}

// applyEvent applies one event, or says why it cannot.
func (s *Subscriber) applyEvent(ev *Event, limit int) (skipped string) {
	ep := s.cfg.Endpoint
	switch ev.Kind {
	case BlockStored:
		tier, ok := MediumTier(ev.Medium)
		if !ok {
			return "unknown medium " + ev.Medium
		}
		bs := s.cfg.Hasher.BlockTokens()
		if ev.BlockSize != 0 && ev.BlockSize != bs {
			return fmt.Sprintf("engine block size %d, gateway block size %d", ev.BlockSize, bs)
		}
		// An adapter's blocks chain from its own seed, as the gateway
		// hashes a prompt for it (the request's model is the adapter): a
		// base-model prefix never counts as cached for an adapter, nor an
		// adapter's for the base model.
		seed := s.cfg.Model
		if ev.LoRAID != 0 || ev.LoRAName != "" {
			if ev.LoRAName == "" {
				return "adapter blocks without lora_name"
			}
			seed = ev.LoRAName
		}
		parent := ModelSeed(seed)
		if ev.HasParent {
			if parent, ok = s.mapping.Get(ev.ParentBlockHash); !ok {
				return "unknown parent block"
			}
		}
		s.chain = s.cfg.Hasher.HashTokensFrom(s.chain[:0], parent, ev.TokenIDs)
		n := min(len(s.chain), len(ev.BlockHashes))
		for i := range n {
			s.mapping.put(ev.BlockHashes[i], s.chain[i], limit)
		}
		s.ix.Record(ep, tier, s.chain[:n])
	case BlockRemoved:
		tier, ok := MediumTier(ev.Medium)
		if !ok {
			return "unknown medium " + ev.Medium
		}
		// The mapping is kept: the block may live on in another tier, or be
		// the parent of blocks stored later.
		s.gone = s.gone[:0]
		for _, eh := range ev.BlockHashes {
			if h, ok := s.mapping.Peek(eh); ok {
				s.gone = append(s.gone, h)
			}
		}
		s.ix.Remove(ep, tier, s.gone)
		s.ix.noteEngineRemoval(ep)
	case AllBlocksCleared:
		s.ix.Clear(ep)
		s.ix.noteEngineRemoval(ep)
		s.mapping.init()
		// The engine's cache is empty and so is the index: they agree again.
		if s.stale {
			s.setStale(false)
		}
	}
	return ""
}

// engineMap maps an endpoint's engine hashes to gateway hashes, bounded
// with LRU: a mapping in use as a parent stays, one for a block long gone
// goes. Get marks a mapping used, Peek does not.
type engineMap struct {
	lru.Cache[EngineHash, BlockHash]
}

func (em *engineMap) init() {
	em.Cache = lru.Cache[EngineHash, BlockHash]{}
}

// put maps eh to h, the most recently used. A new mapping trims the map to
// limit, least recently used first.
func (em *engineMap) put(eh EngineHash, h BlockHash, limit int) {
	n := em.Len()
	em.Add(eh, h)
	if em.Len() > n {
		for em.Len() > limit {
			em.RemoveOldest()
		}
	}
}
