package responses

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/tracing"
)

// job is a background response in this process: its cancel function and
// its events, kept in memory for live followers while it runs.
type job struct {
	id, tenant string
	cancel     context.CancelFunc
	// cancelled is set when a client (not shutdown) stops the job.
	cancelled atomic.Bool
	// lost is set when another gateway holds the job's claim now.
	lost atomic.Bool
	// ended is closed once the response has ended and been stored, or
	// has been left pending by shutdown.
	ended chan struct{}

	mu struct {
		sync.Mutex
		// protects the fields below
		events  []storedEvent
		changed chan struct{}
		done    bool
	}
}

type storedEvent struct {
	typ  string
	data []byte
}

func (j *job) stop() {
	j.cancelled.Store(true)
	j.cancel()
}

// publish makes an event visible to followers.
func (j *job) publish(typ string, data []byte) {
	j.mu.Lock()
	j.mu.events = append(j.mu.events, storedEvent{typ, data})
	close(j.mu.changed)
	j.mu.changed = make(chan struct{})
	j.mu.Unlock()
}

func (j *job) finish() {
	j.mu.Lock()
	j.mu.done = true
	close(j.mu.changed)
	j.mu.changed = make(chan struct{})
	j.mu.Unlock()
	close(j.ended)
}

// follow sends the events after sequence number after, then each new one,
// until the job is done, ctx ends or the sink fails.
func (j *job) follow(ctx context.Context, after int, sink Sink) {
	next := max(after+1, 0)
	for {
		j.mu.Lock()
		var evs []storedEvent
		if next < len(j.mu.events) {
			evs = j.mu.events[next:]
		}
		changed, done := j.mu.changed, j.mu.done
		j.mu.Unlock()
		for _, ev := range evs {
			if sink.Event(ev.typ, ev.data) != nil {
				return
			}
			next++
		}
		if done {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Service) job(id string) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.jobs[id]
}

// createBackground admits a background request against the queue caps,
// then stores it queued and starts its job. A refused request leaves
// nothing behind.
func (s *Service) createBackground(ctx context.Context, tenant string, req *CreateRequest, hdr http.Header) (*Response, error) {
	if err := s.hold(tenant); err != nil {
		return nil, err
	}
	t, err := s.prepare(ctx, tenant, req, hdr, newID("resp_"), s.cfg.Now().Unix())
	if err == nil {
		var resp *Response
		if resp, err = s.enqueue(ctx, t, hdr); err == nil {
			// The job holds the admission now, and gives it back at its end.
			return resp, nil
		}
	}
	s.unhold(tenant)
	return nil, err
}

// hold admits one more background response of tenant, or answers
// ErrRateLimited when the service or the tenant holds as many as allowed:
// with a HeldExchange running, the other gateways' responses count too.
func (s *Service) hold(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch byTenant := s.mu.heldByTenant[tenant] + s.mu.peers.ByTenant[tenant]; {
	case byTenant >= s.cfg.MaxQueuedPerTenant:
		return rateLimitedf("Too many background responses: you have %d that have not finished, the most allowed. Wait for some to finish, or cancel some, and try again.", byTenant)
	case s.mu.held+s.mu.peers.Total >= s.cfg.MaxQueued:
		return rateLimitedf("Too many background responses are waiting to run on this server. Try again later.")
	}
	s.holdLocked(tenant)
	return nil
}

func (s *Service) holdLocked(tenant string) {
	s.mu.held++
	s.mu.heldByTenant[tenant]++
}

// unhold gives back an admission taken by hold.
func (s *Service) unhold(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.held--
	if s.mu.heldByTenant[tenant]--; s.mu.heldByTenant[tenant] <= 0 {
		delete(s.mu.heldByTenant, tenant)
	}
}

// enqueue stores a background response as queued and hands it to a
// worker. From here the job owns the response.
func (s *Service) enqueue(ctx context.Context, t *turn, hdr http.Header) (*Response, error) {
	resp := t.rec.Response
	resp.Status = StatusQueued
	t.rec.Input = t.input
	t.rec.Job = &Job{Request: t.req.raw}
	// Claimed before it is stored as pending, so that no other gateway
	// looking for pending responses takes it first, and marked enqueuing
	// until start registers its job, so that this gateway's own scan,
	// whose claim would be granted, does not run it a second time. The id
	// is new: the claim fails only when the store does.
	s.setEnqueuing(resp.ID, true)
	defer s.setEnqueuing(resp.ID, false)
	if ok, err := s.store.ClaimJob(ctx, resp.ID, s.cfg.Holder, s.cfg.JobLease); err != nil || !ok {
		return nil, errors.Join(errors.New("responses: claiming a new background response"), err)
	}
	if err := s.store.PutResponse(ctx, t.rec, true); err != nil {
		s.releaseJob(resp.ID)
		return nil, err
	}
	snapshot := *resp
	s.start(t, hdr, trace.SpanContextFromContext(ctx))
	return &snapshot, nil
}

func (s *Service) setEnqueuing(id string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !on {
		delete(s.mu.enqueuing, id)
		return
	}
	if s.mu.enqueuing == nil {
		s.mu.enqueuing = map[string]struct{}{}
	}
	s.mu.enqueuing[id] = struct{}{}
}

// runsHere reports whether this gateway runs the background response id
// already, or is about to (enqueuing).
func (s *Service) runsHere(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, enqueuing := s.mu.enqueuing[id]
	return enqueuing || s.mu.jobs[id] != nil
}

// start registers the job and runs it on a worker. The caller has taken
// an admission (hold) for it; the job gives it back when it ends. The
// job's span links to creator, the span of the request that created it.
func (s *Service) start(t *turn, hdr http.Header, creator trace.SpanContext) {
	id := t.rec.Response.ID
	ctx, cancel := context.WithCancel(s.ctx)
	j := &job{id: id, tenant: t.rec.Tenant, cancel: cancel, ended: make(chan struct{})}
	j.mu.changed = make(chan struct{})
	// next is the sequence number of the next event. Events are emitted
	// by whoever runs r: this goroutine until the go statement below,
	// then the job's; so next needs no lock.
	next := 0
	sink := SinkFunc(func(typ string, data []byte) error {
		if err := s.store.AppendEvent(context.Background(), id, next, data); err != nil {
			s.log.Warn("keeping a stream event failed", "response", id, "err", err)
		}
		next++
		j.publish(typ, data)
		return nil
	})
	r := s.newRun(t, sink, 0)
	r.emitResponse("response.created")
	r.emitResponse("response.queued")
	s.mu.Lock()
	s.mu.jobs[id] = j
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		if s.cfg.Tracer.On() {
			var span trace.Span
			ctx, span = s.cfg.Tracer.StartJob(ctx, tracing.OpResponses, t.req.Model, creator)
			span.SetAttributes(tracing.ResponseID.String(id))
			defer span.End()
			defer func() {
				if e := r.resp.Error; e != nil {
					span.SetStatus(codes.Error, e.Message)
				}
			}()
		}
		s.run(ctx, j, t, r, hdr)
	}()
}

// run is a background response's worker. It owns the response until it
// ends, or until shutdown or a lost claim leaves it pending for the
// gateway that claims it next.
func (s *Service) run(ctx context.Context, j *job, t *turn, r *run, hdr http.Header) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.mu.jobs, j.id)
		s.mu.Unlock()
		s.unhold(j.tenant)
		// An ended response needs no claim; one that shutdown left
		// pending is free at once for another gateway (a gateway that
		// dies leaves its claims to run out instead). A claim that is
		// lost is not ours to give.
		if j.lost.Load() {
			s.log.Warn("a background response's claim ran out; left to the gateway that takes it over", "response", j.id)
			s.claimsLost.Inc()
		} else {
			s.releaseJob(j.id)
		}
		j.finish()
		j.cancel()
	}()
	engErr := s.work(ctx, t, r, hdr)
	cancelled := j.cancelled.Load()
	if ctx.Err() != nil && !cancelled {
		// Shutdown, or the claim went to another gateway: the response
		// stays pending and whoever holds the claim runs it.
		return
	}
	// The claim is checked once more before the end is written: a
	// gateway that paused past its lease must not end a response that
	// another gateway now runs (and append its items a second time).
	if ok, err := s.store.RenewJob(context.Background(), j.id, s.cfg.Holder, s.cfg.JobLease); err == nil && !ok {
		j.lost.Store(true)
		return
	}
	r.end(engErr, cancelled, s.cfg.Now().Unix())
	var e *apierror.Error
	if errors.As(engErr, &e) && e.Code != "" && r.resp.Error != nil {
		r.resp.Error.Code = e.Code
	}
	s.endTurn(context.Background(), t, r, j)
}

// work runs a background response's turn on a worker slot and returns
// the engine's failure, if any. When ctx ends first it returns early; the
// caller tells a cancel from shutdown. A refusal that says "try again
// later" is tried again after its RetryAfter, off the worker slot, for up
// to Config.RetryRefusedFor.
func (s *Service) work(ctx context.Context, t *turn, r *run, hdr http.Header) error {
	if !s.takeWorker(ctx) {
		return ctx.Err()
	}
	t.rec.Response.Status = StatusInProgress
	t.rec.Job.Attempts++
	if err := s.store.PutResponse(ctx, t.rec, true); err != nil {
		s.log.Warn("storing a background response failed", "response", t.rec.Response.ID, "err", err)
	}
	r.emitResponse("response.in_progress")
	var refusedAt time.Time
	for refusals := 1; ; refusals++ {
		dt, err := s.begin(ctx, t, hdr)
		if err == nil {
			err = r.consume(dt)
			dt.End(err)
			<-s.sem
			return err
		}
		<-s.sem
		var shed *dispatch.ShedError
		if ctx.Err() != nil || !errors.As(err, &shed) {
			return err
		}
		if refusedAt.IsZero() {
			refusedAt = time.Now()
		}
		left := s.cfg.RetryRefusedFor - time.Since(refusedAt)
		if left <= 0 {
			s.log.Warn("background response refused until it gave up", "response", t.rec.Response.ID, "refusals", refusals, "err", err)
			return refusedError(err)
		}
		wait := shed.RetryAfter
		if wait <= 0 {
			wait = defaultRetryDelay
		}
		// Jitter, so that the jobs one overload refused together do not
		// all come back at the same instant.
		wait = min(wait+mrand.N(wait/4+1), maxRetryDelay, left)
		if !sleep(ctx, wait) || !s.takeWorker(ctx) {
			return ctx.Err()
		}
	}
}

// takeWorker waits for a worker slot; false if ctx ends first.
func (s *Service) takeWorker(ctx context.Context) bool {
	select {
	case s.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleep waits d; false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refusedError is why a background response the engine kept refusing
// failed, in the client's terms: the refusal's own text is the gateway's,
// not the client's.
func refusedError(err error) *apierror.Error {
	var shed *dispatch.ShedError
	if errors.As(err, &shed) && shed.Status == http.StatusTooManyRequests {
		return rateLimitedf("This background response was not run: your rate limits kept refusing it. Try again later.")
	}
	return apierror.Unavailable("server_overloaded",
		"This background response was not run: the model servers were overloaded and kept refusing it. Try again later.").WithClass(ErrEngine)
}

// recover takes over a background response whose claim this gateway has
// just taken, left unfinished by a previous process or a gateway that
// stopped or died: re-runs it, ends it cancelled when a cancel was
// requested for it, or fails it once it has been started MaxAttempts
// times. Either way it is never silently lost.
func (s *Service) recover(rec *Record, cancelRequested bool) {
	id := rec.Response.ID
	end := func(status string, e *ResponseError) {
		rec.Response.Status, rec.Response.Error = status, e
		rec.Inputs = len(rec.Input)
		if err := s.store.EndResponse(s.ctx, rec, nil, rec.Input, nil); err != nil {
			s.log.Error("ending an interrupted background response failed", "response", id, "err", err)
		}
		s.releaseJob(id)
	}
	fail := func(msg string) { end(StatusFailed, &ResponseError{Code: "server_error", Message: msg}) }
	if cancelRequested {
		end(StatusCancelled, nil)
		return
	}
	if rec.Job.Attempts >= s.cfg.MaxAttempts {
		fail(fmt.Sprintf("The gateway restarted while this background response was running, after %d attempts; it is not retried again.", rec.Job.Attempts))
		return
	}
	req, err := DecodeCreateRequest(rec.Job.Request)
	if err != nil {
		fail("The gateway restarted while this background response was running, and its request could not be read again.")
		return
	}
	t, err := s.prepare(s.ctx, rec.Tenant, req, nil, id, rec.Response.CreatedAt)
	if err != nil {
		fail("The gateway restarted while this background response was running, and it could not be run again: " + err.Error())
		return
	}
	t.rec.ExpiresAt = rec.ExpiresAt
	t.rec.Input = t.input
	t.rec.Job = rec.Job
	t.rec.Response.Status = StatusQueued
	if err := s.store.DropEvents(s.ctx, id); err != nil {
		s.log.Warn("dropping old stream events failed", "response", id, "err", err)
	}
	if err := s.store.PutResponse(s.ctx, t.rec, true); err != nil {
		s.log.Error("re-queueing a background response failed", "response", id, "err", err)
		s.releaseJob(id)
		return
	}
	s.log.Info("re-queued an interrupted background response", "response", id, "attempt", rec.Job.Attempts+1)
	// Admitted whatever the caps: it was accepted before the restart.
	s.mu.Lock()
	s.holdLocked(rec.Tenant)
	s.mu.Unlock()
	s.start(t, nil, trace.SpanContext{})
}
