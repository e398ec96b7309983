package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/internal/wait"
	"github.com/turnpike-gateway/turnpike/state"
)

// Defaults for Options.
const (
	DefaultConcurrency    = 16
	DefaultMaxFileBytes   = 32 << 20 // bytes
	DefaultMaxRequests    = 50_000
	DefaultMaxRetries     = 3
	DefaultRetryBackoff   = time.Second
	DefaultMaxBackoff     = 30 * time.Second
	DefaultWindow         = 24 * time.Hour
	DefaultFileRetention  = 30 * 24 * time.Hour
	maxValidationErrors   = 100
	maxMetadataPairs      = 16
	maxMetadataKeyBytes   = 64
	maxMetadataValueBytes = 512
)

// Config is the batch section of the config file. Zero fields take the
// defaults.
type Config struct {
	// Concurrency bounds the requests of all batches in flight at once.
	// Default 16. Flow control decides within it when each may run.
	Concurrency int `yaml:"concurrency"`
	// MaxFileBytes bounds an uploaded file, in bytes. Default 32 MiB (the
	// gateway's bodyLimit bounds it too).
	MaxFileBytes int64 `yaml:"maxFileBytes"`
	// MaxRequests bounds the requests of one batch. Default 50,000.
	MaxRequests int `yaml:"maxRequests"`
	// MaxRetries bounds how often a request that failed on the fleet's
	// side (an engine's 5xx, no endpoint, a broken stream) is tried
	// again; negative means never. Sheds by flow control are retried
	// until the batch's window ends. Default 3.
	MaxRetries int `yaml:"maxRetries"`
	// RetryBackoff is the first wait before a retry, doubled each time up
	// to MaxBackoff; a shed's Retry-After is waited at least. Defaults 1s
	// and 30s.
	RetryBackoff time.Duration `yaml:"retryBackoff"`
	MaxBackoff   time.Duration `yaml:"maxBackoff"`
	// FileRetention is how long output files are kept (their expires_at).
	// Default 720h (30 days).
	FileRetention time.Duration `yaml:"fileRetention"`
	// Intake reads requests from a Redis stream (see Intake); off unless
	// its url is set.
	Intake IntakeConfig `yaml:"intake"`
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Concurrency < 0 || c.MaxFileBytes < 0 || c.MaxRequests < 0 {
		errs = append(errs, errors.New("batch: concurrency, maxFileBytes and maxRequests must not be negative"))
	}
	if c.RetryBackoff < 0 || c.MaxBackoff < 0 || c.FileRetention < 0 {
		errs = append(errs, errors.New("batch: retryBackoff, maxBackoff and fileRetention must not be negative"))
	}
	if c.Intake.URL != "" {
		if _, err := redis.ParseURL(c.Intake.URL); err != nil {
			errs = append(errs, fmt.Errorf("batch: intake url: %w", err))
		}
	}
	if c.Intake.ClaimIdle < 0 || c.Intake.ResultsMaxLen < 0 {
		errs = append(errs, errors.New("batch: intake claimIdle and resultsMaxLen must not be negative"))
	}
	if c.MaxBackoff > 0 && c.MaxBackoff < c.RetryBackoff {
		errs = append(errs, fmt.Errorf("batch: maxBackoff %v is below retryBackoff %v", c.MaxBackoff, c.RetryBackoff))
	}
	return errors.Join(errs...)
}

// Options configure a Service. DB and Dispatch are required; every other
// zero field takes its default.
type Options struct {
	Config
	// DB is the namespace files, batches and results are kept in. Required.
	DB state.Namespace
	// Dispatch runs each request as a background turn. Required.
	Dispatch Dispatcher
	// Window is how long a batch may run before it expires, whatever
	// completion_window says ("24h" is the only one accepted). Default 24h.
	Window time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Metrics is where the service registers its collectors; nil
	// registers none.
	Metrics prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Holder names this gateway in its batches' leases: gateways sharing
	// a store each run the batches they lease, and take over those whose
	// gateway stopped renewing. Default: a random name.
	Holder string
	// Lease is how long a batch's lease lasts unrenewed: how soon another
	// gateway takes over the batches of one that died. Renewed every
	// third of it. Default 30s.
	Lease time.Duration
}

// DefaultLease is Options.Lease's default.
const DefaultLease = 30 * time.Second

// Dispatcher is what a Service needs of the turn path
// (*dispatch.Dispatcher).
type Dispatcher interface {
	Begin(ctx context.Context, spec *dispatch.Spec) (*dispatch.Turn, error)
}

// Service is the Files and Batch API and the runner of batches. Build it
// with New, Start it, Close it.
type Service struct {
	opts    Options
	store   store
	log     *slog.Logger
	metrics *metrics
	// slots bounds the requests in flight across batches.
	slots chan struct{}

	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu struct {
		sync.Mutex
		// protects the fields below
		jobs    map[string]*job
		started bool
		closed  bool
	}
}

// errCancelled is the cause of a batch's context when a client cancels it.
var errCancelled = errors.New("batch: cancelled")

// errLeaseLost is the cause of a batch's context when its lease ran out
// (this gateway paused past it, or the store was unreachable): another
// gateway may run the batch now, so this one stops without ending it.
var errLeaseLost = errors.New("batch: lease lost")

// New validates opts and builds a Service. It starts nothing.
func New(opts Options) (*Service, error) {
	var errs []error
	if opts.DB == nil {
		errs = append(errs, errors.New("batch: DB is required"))
	}
	if opts.Dispatch == nil {
		errs = append(errs, errors.New("batch: Dispatch is required"))
	}
	if err := opts.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	opts.ensureDefaults()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	s := &Service{opts: opts, store: store{opts.DB}, log: opts.Logger, metrics: m, slots: make(chan struct{}, opts.Concurrency)}
	s.mu.jobs = map[string]*job{}
	s.ctx, s.stop = context.WithCancel(context.Background())
	return s, nil
}

func (o *Options) ensureDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Concurrency, DefaultConcurrency)
	def(&o.MaxRequests, DefaultMaxRequests)
	if o.MaxRetries < 0 {
		o.MaxRetries = 0
	} else if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	defDur(&o.RetryBackoff, DefaultRetryBackoff)
	defDur(&o.MaxBackoff, DefaultMaxBackoff)
	defDur(&o.Window, DefaultWindow)
	defDur(&o.FileRetention, DefaultFileRetention)
	defDur(&o.Lease, DefaultLease)
	if o.Holder == "" {
		o.Holder = newID("gw_", time.Now())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Start resumes the batches a previous process left unfinished: a batch
// in progress goes on from the requests it has no result for.
func (s *Service) Start(ctx context.Context) error {
	recs, err := s.store.unfinished(ctx)
	if err != nil {
		return fmt.Errorf("batch: reading unfinished batches: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return errors.New("batch: closed")
	}
	s.mu.started = true
	s.mu.Unlock()
	s.claim(ctx, recs)
	s.mu.Lock()
	s.wg.Add(1)
	go s.takeOver()
	return nil
}

// claim leases and runs those of recs, unfinished batches, that no gateway
// runs: every one at a start on a store of its own, and on a shared store
// those whose gateway stopped renewing its lease.
func (s *Service) claim(ctx context.Context, recs []*batchRecord) {
	for _, rec := range recs {
		id := rec.Batch.ID
		s.mu.Lock()
		_, running := s.mu.jobs[id]
		closed := s.mu.closed
		s.mu.Unlock()
		if running || closed {
			continue
		}
		ok, err := s.store.ns.Lease(ctx, leaseKey(id), s.opts.Holder, s.opts.Lease)
		if err != nil {
			s.log.Warn("leasing an unfinished batch failed", "batch", id, "err", err)
			continue
		}
		if !ok {
			continue // another gateway runs it
		}
		s.mu.Lock()
		if _, running := s.mu.jobs[id]; running || s.mu.closed {
			s.mu.Unlock()
			continue
		}
		s.log.Info("resuming batch", "batch", id, "status", rec.Batch.Status)
		s.metrics.resumed.Inc()
		s.launchLocked(rec)
		s.mu.Unlock()
	}
}

// takeOver looks for unfinished batches whose lease ran out, every half
// lease, until the service closes.
func (s *Service) takeOver() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.Lease / 2)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		recs, err := s.store.unfinished(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				s.log.Warn("reading unfinished batches failed", "err", err)
			}
			continue
		}
		s.claim(s.ctx, recs)
	}
}

func leaseKey(id string) []byte  { return []byte("lease/" + id) }
func cancelKey(id string) []byte { return []byte("cancelreq/" + id) }

// Close stops every batch's runner and waits for them, up to ctx: the
// requests in flight are abandoned without a result, and run again when
// a Service on the same store starts.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.mu.closed = true
	s.mu.Unlock()
	s.stop()
	if err := wait.Group(ctx, &s.wg); err != nil {
		return fmt.Errorf("batch: close: %w", err)
	}
	return nil
}

// launchLocked starts the runner of rec's batch.
func (s *Service) launchLocked(rec *batchRecord) {
	deadline := time.Unix(*rec.Batch.ExpiresAt, 0)
	base, cancel := context.WithCancelCause(s.ctx)
	ctx, stopTimer := context.WithDeadline(base, deadline)
	j := &job{s: s, rec: rec, cancel: cancel, stopTimer: stopTimer}
	if rec.Batch.Status == StatusCancelling {
		cancel(errCancelled)
	}
	s.mu.jobs[rec.Batch.ID] = j
	s.wg.Add(1)
	s.metrics.active.Inc()
	go func() {
		defer s.wg.Done()
		defer s.metrics.active.Dec()
		keep := make(chan struct{})
		kept := make(chan struct{})
		go func() {
			defer close(kept)
			j.keep(ctx, keep)
		}()
		defer func() {
			close(keep)
			<-kept
			s.mu.Lock()
			delete(s.mu.jobs, rec.Batch.ID)
			s.mu.Unlock()
			stopTimer()
			// A lost lease is not ours to give back; one this gateway
			// holds is freed at once, whether the batch ended or the
			// service closes, so that the next gateway need not wait
			// for it to run out.
			if !errors.Is(context.Cause(ctx), errLeaseLost) {
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := s.store.ns.Release(rctx, leaseKey(rec.Batch.ID), s.opts.Holder); err != nil {
					s.log.Warn("releasing a batch's lease failed", "batch", rec.Batch.ID, "err", err)
				}
				rcancel()
			}
			cancel(nil)
		}()
		j.run(ctx)
	}()
}

func (s *Service) now() time.Time { return s.opts.Now() }
