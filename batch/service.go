package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/jobs"
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
	// Clock times the renewals of the leases and the scans for free ones;
	// nil means the wall clock. Tests move one (the leases are timed by
	// the store's).
	Clock jobs.Clock
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
	// jobs runs the batches, each under a lease of the store.
	jobs *jobs.Queue[*job]

	// ctx is for the reads and writes of batch records, which outlive a
	// batch's own context (its window, a cancel); Close cancels it.
	ctx  context.Context
	stop context.CancelFunc
}

// jobKeys are the batches' leases and cancel requests in the namespace.
var jobKeys = jobs.Keys{Lease: "lease/", Cancel: "cancelreq/"}

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
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.jobs, err = jobs.New(jobs.Options[*job]{
		Namespace: opts.DB, Keys: jobKeys, Holder: opts.Holder, Lease: opts.Lease, Clock: opts.Clock,
		Logger:  opts.Logger.With("jobs", "batches"),
		Pending: s.pending, Adopt: s.adopt,
		// A cancel asked of another gateway: the record here says so too.
		Cancelled: func(j *jobs.Job[*job]) {
			if _, err := j.Work.requestCancel(s.ctx); err != nil {
				s.log.Warn("cancelling a batch asked elsewhere failed", "batch", j.ID, "err", err)
			}
		},
		LeaseLost: func(*jobs.Job[*job]) { s.metrics.leasesLost.Inc() },
	})
	if err != nil {
		return nil, err
	}
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

// Start resumes the batches a previous process left unfinished, and
// those of gateways on the store that stopped renewing their leases: a
// batch in progress goes on from the requests it has no result for.
func (s *Service) Start(ctx context.Context) error {
	if err := s.jobs.Start(ctx); err != nil {
		return fmt.Errorf("batch: reading unfinished batches: %w", err)
	}
	return nil
}

// pending lists the batches that have not ended.
func (s *Service) pending(ctx context.Context) ([]string, error) {
	recs, err := s.store.unfinished(ctx)
	ids := make([]string, len(recs))
	for i, rec := range recs {
		ids[i] = rec.Batch.ID
	}
	return ids, err
}

// adopt resumes batch id, whose lease this gateway has just taken: every
// unfinished batch at a start on a store of its own, and on a shared store
// those whose gateway stopped renewing its lease. Its record is read again
// under the lease: its gateway may have ended it since it was listed. A
// cancel asked of another gateway is in the record (cancelling).
func (s *Service) adopt(ctx context.Context, id string, _ bool) {
	rec, err := s.store.batch(ctx, "", id)
	if err != nil || terminal(rec.Batch.Status) {
		if err != nil {
			s.log.Warn("reading an unfinished batch failed", "batch", id, "err", err)
		}
		return
	}
	s.log.Info("resuming batch", "batch", id, "status", rec.Batch.Status)
	s.metrics.resumed.Inc()
	s.jobs.Run(id, &job{s: s, rec: rec}, s.runJob)
}

// Close stops every batch's runner and waits for them, up to ctx: the
// requests in flight are abandoned without a result, and run again when
// a Service on the same store starts.
func (s *Service) Close(ctx context.Context) error {
	s.stop()
	if err := s.jobs.Close(ctx); err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	return nil
}

// runJob is the goroutine of a batch's job: it runs the batch until its
// window ends (the record's expires_at), a cancel, a lost lease or Close.
func (s *Service) runJob(ctx context.Context, jj *jobs.Job[*job]) {
	j := jj.Work
	s.metrics.active.Inc()
	defer s.metrics.active.Dec()
	ctx, stopTimer := context.WithDeadline(ctx, time.Unix(*j.snapshot().ExpiresAt, 0))
	defer stopTimer()
	if j.snapshot().Status == StatusCancelling {
		jj.Cancel()
	}
	j.run(ctx)
}

func (s *Service) now() time.Time { return s.opts.Now() }

// running is batch id's job when it runs here, else nil.
func (s *Service) running(id string) *job {
	if j := s.jobs.Get(id); j != nil {
		return j.Work
	}
	return nil
}
