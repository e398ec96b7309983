package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/internal/wait"
	"github.com/turnpike-gateway/turnpike/jobs"
)

// Defaults for IntakeConfig.
const (
	DefaultIntakeStream  = "turnpike:intake"
	DefaultResultsStream = "turnpike:results"
	DefaultIntakeGroup   = "turnpike"
	DefaultClaimIdle     = 10 * time.Minute
	// DefaultResultsMaxLen is about how many results the result stream
	// keeps (XADD MAXLEN ~).
	DefaultResultsMaxLen = 100_000
)

// Result codes of the async intake: what a request ended with.
const (
	CodeCompleted      = "completed"
	CodeDeadline       = "deadline_exceeded"
	CodeCancelled      = "cancelled"
	CodeRefused        = "refused"
	CodeEngineError    = "engine_error"
	CodeInvalidRequest = "invalid_request"
)

// IntakeConfig is the batch.intake section: requests read from a Redis
// stream. Off unless URL is set.
type IntakeConfig struct {
	// URL is the Redis server, redis:// or rediss://; "" leaves the intake
	// off (the default).
	URL string `yaml:"url"`
	// Stream is the stream requests are read from. Default
	// turnpike:intake.
	Stream string `yaml:"stream"`
	// Results is the stream results are written to. Default
	// turnpike:results.
	Results string `yaml:"results"`
	// Group is the consumer group the gateways read in; Consumer this
	// gateway's name in it. Defaults turnpike and the host name.
	Group    string `yaml:"group"`
	Consumer string `yaml:"consumer"`
	// ClaimIdle is how long a request read by a gateway may stay
	// unanswered before another gateway takes it over (XAUTOCLAIM).
	// Default 10m; it should exceed the longest request.
	ClaimIdle time.Duration `yaml:"claimIdle"`
	// ResultsMaxLen trims the result stream to about that many entries.
	// Default 100,000.
	ResultsMaxLen int64 `yaml:"resultsMaxLen"`
}

func (c *IntakeConfig) ensureDefaults() {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&c.Stream, DefaultIntakeStream)
	def(&c.Results, DefaultResultsStream)
	def(&c.Group, DefaultIntakeGroup)
	if c.Consumer == "" {
		c.Consumer, _ = os.Hostname()
		def(&c.Consumer, "turnpike")
	}
	if c.ClaimIdle <= 0 {
		c.ClaimIdle = DefaultClaimIdle
	}
	if c.ResultsMaxLen <= 0 {
		c.ResultsMaxLen = DefaultResultsMaxLen
	}
}

// Intake reads OpenAI-shaped requests from a Redis stream and runs each
// through the Service's runner, on the capacity interactive traffic
// leaves, writing each result to the result stream under its id. Build
// it with NewIntake; Start it; Close it before the Service.
//
// A request is a stream entry with the fields id (required), body (the
// request body, JSON), endpoint (default /v1/chat/completions), tenant
// (default "default"), priority (background, the default, or standard:
// the band it asks for, capped by the tenant's maximum) and deadline
// (RFC 3339 or Unix seconds; none by default). An entry with the field
// cancel names the id of a request to stop. A result is an entry with id,
// code (one of the Code constants), status_code and body (the engine's
// answer or an OpenAI error). Entries are acknowledged once their result
// is written: a gateway that dies leaves its requests pending, and the
// next one to start (or another, after ClaimIdle) runs them.
type Intake struct {
	s      *Service
	cfg    IntakeConfig
	client *redis.Client

	// ctx and wg are the reader's; Close cancels ctx and joins it.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	// reqs runs the requests in flight, by id. The stream's consumer
	// group is their lease: they run here only.
	reqs *jobs.Queue[struct{}]
}

// NewIntake builds the intake of cfg for s. It connects to nothing yet.
func NewIntake(s *Service, cfg IntakeConfig) (*Intake, error) {
	cfg.ensureDefaults()
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("batch: intake url: %w", err)
	}
	reqs, err := jobs.New(jobs.Options[struct{}]{Logger: s.log})
	if err != nil {
		return nil, err
	}
	in := &Intake{s: s, cfg: cfg, client: redis.NewClient(opts), reqs: reqs}
	in.ctx, in.stop = context.WithCancel(context.Background())
	return in, nil
}

// Start makes the consumer group (and the stream) if missing and starts
// reading: first this consumer's own pending requests, then new ones.
func (in *Intake) Start(ctx context.Context) error {
	err := in.client.XGroupCreateMkStream(ctx, in.cfg.Stream, in.cfg.Group, "0").Err()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("batch: intake: %w", err)
	}
	if err := in.reqs.Start(ctx); err != nil {
		return fmt.Errorf("batch: intake: %w", err)
	}
	in.wg.Add(1)
	go in.read()
	return nil
}

// Close stops reading, stops the requests in flight (they stay pending,
// for the next start) and closes the connection.
func (in *Intake) Close(ctx context.Context) error {
	in.stop()
	if err := errors.Join(wait.Group(ctx, &in.wg), in.reqs.Close(ctx)); err != nil {
		return fmt.Errorf("batch: intake close: %w", err)
	}
	return in.client.Close()
}

func (in *Intake) read() {
	defer in.wg.Done()
	ctx := in.ctx
	// First what this consumer read before and did not answer (from "0",
	// page by page), then new entries (">").
	from, pending := "0", true
	lastClaim := time.Time{}
	for ctx.Err() == nil {
		if !pending && time.Since(lastClaim) > in.cfg.ClaimIdle/2 {
			lastClaim = time.Now()
			in.claim(ctx)
		}
		streams, err := in.client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: in.cfg.Group, Consumer: in.cfg.Consumer, Streams: []string{in.cfg.Stream, from},
			Count: int64(in.s.opts.Concurrency), Block: time.Second,
		}).Result()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			in.s.log.Warn("batch intake: reading the stream failed", "err", err)
			jobs.Sleep(ctx, jobs.Wall, time.Second)
			continue
		}
		n := 0
		for _, st := range streams {
			for _, m := range st.Messages {
				n++
				in.handle(ctx, m)
				if pending {
					from = m.ID
				}
			}
		}
		if pending && n == 0 {
			from, pending = ">", false
		}
	}
}

// claim takes over the requests other gateways read and left unanswered
// for ClaimIdle.
func (in *Intake) claim(ctx context.Context) {
	start := "0-0"
	for ctx.Err() == nil {
		msgs, next, err := in.client.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: in.cfg.Stream, Group: in.cfg.Group, Consumer: in.cfg.Consumer,
			MinIdle: in.cfg.ClaimIdle, Start: start, Count: 100,
		}).Result()
		if err != nil {
			if ctx.Err() == nil {
				in.s.log.Warn("batch intake: claiming idle requests failed", "err", err)
			}
			return
		}
		for _, m := range msgs {
			in.handle(ctx, m)
		}
		if next == "0-0" || len(msgs) == 0 {
			return
		}
		start = next
	}
}

// intakeRequest is a stream entry read as a request.
type intakeRequest struct {
	id, tenant, band string
	line             *Line
	deadline         time.Time
}

// parseEntry reads a request entry's fields; an error is the entry's
// answer (invalid_request), with the id when it had one.
func parseEntry(values map[string]any) (*intakeRequest, error) {
	field := func(k string) string { s, _ := values[k].(string); return s }
	r := &intakeRequest{id: field("id"), tenant: field("tenant")}
	if r.id == "" {
		return r, errors.New("the entry has no id")
	}
	if !utf8.ValidString(r.id) || len(r.id) > MaxCustomIDLength {
		return r, fmt.Errorf("the id is not UTF-8 of at most %d bytes", MaxCustomIDLength)
	}
	if r.tenant == "" {
		r.tenant = "default"
	}
	switch p := field("priority"); p {
	case "", "background":
	case "standard":
		r.band = "standard"
	default:
		return r, fmt.Errorf("priority '%s' is not background or standard", p)
	}
	if d := field("deadline"); d != "" {
		if secs, err := strconv.ParseInt(d, 10, 64); err == nil {
			r.deadline = time.Unix(secs, 0)
		} else if t, err := time.Parse(time.RFC3339, d); err == nil {
			r.deadline = t
		} else {
			return r, fmt.Errorf("deadline '%s' is neither RFC 3339 nor Unix seconds", d)
		}
	}
	endpoint := field("endpoint")
	if endpoint == "" {
		endpoint = EndpointChatCompletions
	}
	if endpoint != EndpointChatCompletions && endpoint != EndpointCompletions {
		return r, fmt.Errorf("endpoint '%s' is not %s or %s", endpoint, EndpointChatCompletions, EndpointCompletions)
	}
	raw, _ := json.Marshal(map[string]any{"custom_id": r.id, "method": "POST", "url": endpoint, "body": json.RawMessage(field("body"))})
	l, err := ParseLine(raw, 1, endpoint)
	if err != nil || !json.Valid([]byte(field("body"))) {
		return r, errors.New("body is not a JSON object")
	}
	r.line = l
	return r, nil
}

// handle acts on one entry: a cancel, or a request run in its own
// goroutine once a slot is free.
func (in *Intake) handle(ctx context.Context, m redis.XMessage) {
	if id, ok := m.Values["cancel"].(string); ok {
		in.reqs.Cancel(id)
		in.ack(m.ID)
		return
	}
	req, err := parseEntry(m.Values)
	if err != nil {
		in.finish(m.ID, req.id, CodeInvalidRequest, 400, errorBody("invalid_request_error", "The entry is not a request: "+err.Error()+".", CodeInvalidRequest))
		return
	}
	if in.reqs.Get(req.id) != nil {
		// Claimed again while it runs here: it is answered once.
		return
	}
	select {
	case in.s.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	ran := in.reqs.Run(req.id, struct{}{}, func(rctx context.Context, j *jobs.Job[struct{}]) {
		defer func() { <-in.s.slots }()
		in.s.metrics.inFlight.Inc()
		defer in.s.metrics.inFlight.Dec()
		if !req.deadline.IsZero() {
			var stop context.CancelFunc
			rctx, stop = context.WithDeadline(rctx, req.deadline)
			defer stop()
		}
		a, ok := in.s.call(rctx, req.tenant, req.band, req.line, newID("intake_req_", in.s.now()))
		switch {
		case ok:
			code := map[string]string{kindCompleted: CodeCompleted, kindInvalid: CodeInvalidRequest, kindRefused: CodeRefused, kindEngine: CodeEngineError}[a.kind]
			in.finish(m.ID, req.id, code, a.status, a.body)
		case in.ctx.Err() != nil:
			// Shutdown: left pending for the next start.
		case j.Cancelled():
			in.finish(m.ID, req.id, CodeCancelled, 499, errorBody("server_error", "The request was cancelled.", CodeCancelled))
		default:
			in.finish(m.ID, req.id, CodeDeadline, 408, errorBody("server_error", "The request's deadline passed before it had an answer.", CodeDeadline))
		}
	})
	if !ran {
		<-in.s.slots // closing, or it runs here already
	}
}

func errorBody(typ, msg, code string) []byte {
	return (&apierror.Error{Type: typ, Message: msg, Code: code}).Body()
}

// finish writes a result and acknowledges its entry, in one transaction.
func (in *Intake) finish(entry, id, code string, status int, body []byte) {
	ctx := context.WithoutCancel(in.ctx)
	_, err := in.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{
			Stream: in.cfg.Results, MaxLen: in.cfg.ResultsMaxLen, Approx: true,
			Values: []any{"id", id, "code", code, "status_code", strconv.Itoa(status), "body", string(body)},
		})
		p.XAck(ctx, in.cfg.Stream, in.cfg.Group, entry)
		return nil
	})
	if err != nil {
		in.s.log.Warn("batch intake: writing a result failed; the request stays pending", "id", id, "err", err)
		return
	}
	in.s.metrics.intake.WithLabelValues(code).Inc()
}

func (in *Intake) ack(entry string) {
	if err := in.client.XAck(context.WithoutCancel(in.ctx), in.cfg.Stream, in.cfg.Group, entry).Err(); err != nil {
		in.s.log.Warn("batch intake: acknowledging an entry failed", "err", err)
	}
}
