package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/accelerators"
)

// Errors.
var (
	// ErrClosed is returned for requests to an engine that was closed.
	ErrClosed = errors.New("sim: engine closed")
	// errCancelled ends a sequence whose client went away.
	errCancelled = errors.New("sim: request cancelled")
)

// Engine is one simulated model server. Its loop goroutine runs the
// scheduler; HTTP handlers submit sequences to it and stream what it
// produces. Create it with New and release it with Close.
type Engine struct {
	cfg         Config
	acc         accelerators.Accelerator
	model       accelerators.Model
	maxModelLen int
	numBlocks   int
	created     int64

	metrics *metrics
	handler http.Handler
	pub     *kvPublisher // nil without KVEventsAddr
	lora    *loras       // nil without MaxLoRAs
	nextID  atomic.Uint64
	healthy atomic.Bool
	// eventErrors counts KV event batches that could not be queued.
	eventErrors atomic.Int64

	mu struct {
		sync.Mutex
		// protects the fields below
		inbox  []*sequence
		closed bool
	}
	wake   chan struct{} // capacity 1: the inbox has sequences, or a lease was claimed
	resets chan chan struct{}
	// engineID names this engine instance to decoders (remote_engine_id):
	// a restarted engine holds none of its predecessor's leases.
	engineID  string
	quit      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once

	faults struct {
		sync.Mutex
		// protects the fields below
		rand *rand.Rand
	}

	stats struct {
		sync.Mutex
		// protects the fields below
		Stats
	}

	// Owned by the loop goroutine (and by Close once the loop stopped).
	sched    *scheduler
	events   *eventLog
	loraInfo *loraInfo // nil without MaxLoRAs
}

// Stats is a snapshot of an engine's scheduler, updated every step.
type Stats struct {
	// Running and Waiting are sequences in the batch and in the queue.
	Running, Waiting int
	// UsedBlocks are KV blocks referenced by running sequences, of
	// NumBlocks.
	UsedBlocks, NumBlocks int
	// SimTime is the engine's simulated clock.
	SimTime time.Duration
	// Steps counts engine steps run.
	Steps int64
}

// New validates cfg (after EnsureDefaults), sizes the KV cache, binds the
// KV event socket if asked and starts the engine loop.
func New(cfg Config) (*Engine, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	acc, _ := accelerators.LookupAccelerator(cfg.Accelerator)
	model, _ := accelerators.LookupModel(cfg.Model)
	e := &Engine{
		cfg:         cfg,
		acc:         acc,
		model:       model,
		maxModelLen: cfg.maxModelLen(model),
		numBlocks:   cfg.numBlocks(acc, model),
		created:     time.Now().Unix(),
		wake:        make(chan struct{}, 1),
		resets:      make(chan chan struct{}),
		quit:        make(chan struct{}),
		stopped:     make(chan struct{}),
	}
	e.healthy.Store(true)
	e.faults.rand = rand.New(rand.NewPCG(cfg.Seed, 0x7475726e70696b65))
	e.engineID = fmt.Sprintf("%s-%016x", cfg.Name, rand.Uint64())
	if cfg.KVEventsAddr != "" {
		pub, err := newKVPublisher(cfg.KVEventsAddr, cfg.KVEventsTopic)
		if err != nil {
			return nil, err
		}
		e.pub = pub
		e.events = &eventLog{blockSize: cfg.BlockSize}
	}
	e.metrics = newMetrics(cfg.Flavor, cfg.ServedModelName, cfg.BlockSize, e.numBlocks, cfg.MaxNumSeqs, cfg.MaxBatchedTokens)
	if cfg.MaxLoRAs > 0 {
		e.lora = newLoRAs(&cfg, e.metrics.reg, cfg.ServedModelName)
		e.loraInfo = newLoRAInfo(e.metrics.reg, cfg.MaxLoRAs)
	}
	cache := newKVCache(e.numBlocks, cfg.BlockSize, e.events)
	cache.lower = cfg.lowerTiers(acc, e.events)
	e.sched = newScheduler(&cfg, acc, model, cache, e.metrics)
	e.stats.NumBlocks = e.numBlocks
	e.handler = e.routes()
	go e.run()
	return e, nil
}

// Config returns the engine's configuration, defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// NumBlocks is the KV cache size in blocks.
func (e *Engine) NumBlocks() int { return e.numBlocks }

// MaxModelLen is the most prompt plus output tokens a request may ask for.
func (e *Engine) MaxModelLen() int { return e.maxModelLen }

// KVEventsAddr is the bound KV event endpoint, "" when not publishing.
func (e *Engine) KVEventsAddr() string {
	if e.pub == nil {
		return ""
	}
	return e.pub.addr()
}

// Registry is the engine's own Prometheus registry, served at /metrics.
func (e *Engine) Registry() *prometheus.Registry { return e.metrics.reg }

// SetHealthy makes /health answer 200 (true) or 503 (false), to exercise
// a gateway's health checks.
func (e *Engine) SetHealthy(ok bool) { e.healthy.Store(ok) }

// Stats returns the latest scheduler snapshot.
func (e *Engine) Stats() Stats {
	e.stats.Lock()
	defer e.stats.Unlock()
	return e.stats.Stats
}

// ResetPrefixCache drops every cached block no running request uses, as
// vLLM's /reset_prefix_cache does: the next requests start cold. It
// publishes AllBlocksCleared when nothing was in use.
func (e *Engine) ResetPrefixCache(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case e.resets <- done:
	case <-e.stopped:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the engine loop, fails every request still in it with
// ErrClosed and closes the KV event socket. It is safe to call twice.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.mu.closed = true
		inbox := e.mu.inbox
		e.mu.inbox = nil
		e.mu.Unlock()
		close(e.quit)
		<-e.stopped
		// The loop is gone: the scheduler is ours.
		for _, qs := range [][]*sequence{inbox, e.sched.waiting, e.sched.running} {
			for _, q := range qs {
				q.finish(ErrClosed)
			}
		}
		if e.pub != nil {
			err = e.pub.close()
		}
	})
	return err
}

// submit hands q to the engine loop. From here the loop owns q's engine
// fields until it calls q.finish.
func (e *Engine) submit(q *sequence) error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.mu.inbox = append(e.mu.inbox, q)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// run is the engine loop: take new sequences, plan a step, sleep its
// scaled duration, apply it, publish. It blocks only when there is
// nothing to run.
func (e *Engine) run() {
	defer close(e.stopped)
	scale := e.cfg.TimeScale
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// Steps are paced against an anchor so that timer overshoot in one
	// step is taken back from the next, not accumulated.
	anchorWall, anchorSim := time.Now(), e.sched.clock
	var inbox []*sequence
	for {
		inbox = e.takeInbox(inbox[:0])
		for _, q := range inbox {
			e.sched.enqueue(q)
		}
		clear(inbox)
		e.sched.releaseClaimed()
		nextExpiry := e.sched.expireLeases()
		dur := e.sched.schedule()
		if len(e.sched.batch) == 0 && dur == 0 {
			e.publishStats(false)
			idleFrom := time.Now()
			var expiry <-chan time.Time
			if !nextExpiry.IsZero() {
				timer.Reset(time.Until(nextExpiry))
				expiry = timer.C
			}
			select {
			case <-e.quit:
				return
			case <-e.wake:
			case <-expiry:
			case done := <-e.resets:
				e.resetPrefixCache()
				close(done)
			}
			if expiry != nil && !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			if scale > 0 {
				e.sched.clock += time.Duration(float64(time.Since(idleFrom)) / scale)
			}
			anchorWall, anchorSim = time.Now(), e.sched.clock
			continue
		}
		if scale > 0 && dur > 0 {
			target := anchorWall.Add(time.Duration(float64(e.sched.clock+dur-anchorSim) * scale))
			if d := time.Until(target); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-e.quit:
					return
				}
			}
		}
		e.sched.apply(dur)
		e.publishEvents()
		e.publishStats(true)
		select {
		case done := <-e.resets:
			e.resetPrefixCache()
			close(done)
		default:
		}
	}
}

func (e *Engine) takeInbox(dst []*sequence) []*sequence {
	e.mu.Lock()
	defer e.mu.Unlock()
	dst = append(dst, e.mu.inbox...)
	clear(e.mu.inbox)
	e.mu.inbox = e.mu.inbox[:0]
	return dst
}

func (e *Engine) resetPrefixCache() {
	if e.sched.kv.evictUnreferenced() {
		e.events.cleared()
	}
	e.publishEvents()
}

// publishEvents sends the step's KV events, if any, and clears the log.
func (e *Engine) publishEvents() {
	if e.events.empty() {
		return
	}
	ts := float64(time.Now().UnixNano()) / 1e9
	if err := e.pub.publish(e.events, ts); err != nil {
		// A subscriber that misses a batch sees the sequence gap, as
		// with vLLM; the engine carries on.
		e.eventErrors.Add(1)
	}
	e.events.reset()
}

// publishStats exports the scheduler's gauges after a step (stepped) or
// before idling.
func (e *Engine) publishStats(stepped bool) {
	s := e.sched
	usage := s.kv.usage()
	e.metrics.running.Set(float64(len(s.running)))
	e.metrics.waiting.Set(float64(len(s.waiting)))
	e.metrics.usage.Set(usage)
	if e.loraInfo != nil {
		e.loraInfo.set(e.lora.requestsInfo(s.running, s.waiting))
	}
	e.stats.Lock()
	e.stats.Running = len(s.running)
	e.stats.Waiting = len(s.waiting)
	e.stats.UsedBlocks = s.kv.used
	e.stats.SimTime = s.clock
	if stepped {
		e.stats.Steps++
	}
	e.stats.Unlock()
}
