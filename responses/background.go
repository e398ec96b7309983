package responses

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/jobs"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/tracing"
)

// job is a background response in this process, the work of its
// jobs.Job: its events, kept in memory for live followers while it runs.
type job struct {
	tenant string

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

// job is background response id's job when it runs here, else nil.
func (s *Service) job(id string) *jobs.Job[*job] { return s.jobs.Get(id) }

// createBackground admits a background request against the queue caps,
// then stores it queued and starts its job. A refused request leaves
// nothing behind.
func (s *Service) createBackground(ctx context.Context, tenant string, req *wire.CreateRequest, hdr http.Header) (*wire.Response, error) {
	if err := s.hold(tenant); err != nil {
		return nil, err
	}
	t, err := s.prepare(ctx, tenant, req, hdr, newID("resp_"), s.cfg.Now().Unix())
	if err == nil {
		var resp *wire.Response
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

// enqueue stores a background response as queued and runs it here. From
// here the job owns the response. The queue leases it before it is stored
// as pending, so that no other gateway looking for pending responses takes
// it first; the id is new, so the lease fails only when the store does.
func (s *Service) enqueue(ctx context.Context, t *turn, hdr http.Header) (*wire.Response, error) {
	resp := t.rec.Response
	resp.Status = wire.StatusQueued
	t.rec.Input = t.input
	t.rec.Job = &Job{Request: t.req.Body}
	var snapshot wire.Response
	j, r := s.newJob(t)
	err := s.jobs.Enqueue(ctx, resp.ID, j, func(ctx context.Context) error {
		if err := s.store.PutResponse(ctx, t.rec, true); err != nil {
			return err
		}
		snapshot = *resp
		r.emitResponse("response.created")
		r.emitResponse("response.queued")
		return nil
	}, s.runner(t, r, hdr, trace.SpanContextFromContext(ctx)))
	if err != nil {
		return nil, fmt.Errorf("responses: enqueuing a background response: %w", err)
	}
	return &snapshot, nil
}

// newJob is the job of a background response and the run that emits its
// events: each is stored, and published to the followers here.
func (s *Service) newJob(t *turn) (*job, *run) {
	id := t.rec.Response.ID
	j := &job{tenant: t.rec.Tenant}
	j.mu.changed = make(chan struct{})
	// next is the sequence number of the next event. Events are emitted
	// by whoever runs r: the caller until the job starts, then the job's
	// goroutine; so next needs no lock.
	next := 0
	sink := SinkFunc(func(typ string, data []byte) error {
		if err := s.store.AppendEvent(context.Background(), id, next, data); err != nil {
			s.log.Warn("keeping a stream event failed", "response", id, "err", err)
		}
		next++
		j.publish(typ, data)
		return nil
	})
	return j, s.newRun(t, sink, 0)
}

// runner is the goroutine of a background response's job. The caller has
// taken an admission (hold) for it; the job gives it back when it ends.
// The job's span links to creator, the span of the request that created
// it.
func (s *Service) runner(t *turn, r *run, hdr http.Header, creator trace.SpanContext) func(context.Context, *jobs.Job[*job]) {
	return func(ctx context.Context, j *jobs.Job[*job]) {
		if s.cfg.Tracer.On() {
			var span trace.Span
			ctx, span = s.cfg.Tracer.StartJob(ctx, tracing.OpResponses, t.req.Model, creator)
			span.SetAttributes(tracing.ResponseID.String(j.ID))
			defer span.End()
			defer func() {
				if e := r.resp.Error; e != nil {
					span.SetStatus(codes.Error, e.Message)
				}
			}()
		}
		s.run(ctx, j, t, r, hdr)
	}
}

// run is a background response's worker. It owns the response until it
// ends, or until shutdown or a lost claim leaves it pending for the
// gateway that claims it next.
func (s *Service) run(ctx context.Context, j *jobs.Job[*job], t *turn, r *run, hdr http.Header) {
	defer func() {
		s.unhold(j.Work.tenant)
		j.Work.finish()
	}()
	engErr := s.work(ctx, t, r, hdr)
	cancelled := j.Cancelled()
	if ctx.Err() != nil && !cancelled {
		// Shutdown, or the claim went to another gateway: the response
		// stays pending and whoever holds the claim runs it.
		return
	}
	// The lease is checked once more before the end is written: a
	// gateway that paused past its lease must not end a response that
	// another gateway now runs (and append its items a second time).
	if !s.jobs.Keep(context.Background(), j) {
		return
	}
	r.end(engErr, cancelled, s.cfg.Now().Unix())
	var e *apierror.Error
	if errors.As(engErr, &e) && e.Code != "" && r.resp.Error != nil {
		r.resp.Error.Code = e.Code
	}
	s.endTurn(context.Background(), t, r, j.Work)
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
	defer t.release()
	t.rec.Response.Status = wire.StatusInProgress
	t.rec.Job.Attempts++
	if err := s.store.PutResponse(ctx, t.rec, true); err != nil {
		s.log.Warn("storing a background response failed", "response", t.rec.Response.ID, "err", err)
	}
	r.emitResponse("response.in_progress")
	retry := jobs.Retry{Backoff: jobs.Backoff{First: defaultRetryDelay, Max: maxRetryDelay}, MaxWait: maxRetryDelay, For: s.cfg.RetryRefusedFor}
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
		switch werr := retry.Wait(ctx, refusals, shed.RetryAfter); {
		case errors.Is(werr, jobs.ErrGaveUp):
			s.log.Warn("background response refused until it gave up", "response", t.rec.Response.ID, "refusals", refusals, "err", err)
			return refusedError(err)
		case werr != nil:
			return werr
		}
		if !s.takeWorker(ctx) {
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
	end := func(status string, e *wire.ResponseError) {
		rec.Response.Status, rec.Response.Error = status, e
		rec.Inputs = len(rec.Input)
		if err := s.store.EndResponse(s.ctx, rec, nil, rec.Input, nil); err != nil {
			s.log.Error("ending an interrupted background response failed", "response", id, "err", err)
		}
	}
	fail := func(msg string) { end(wire.StatusFailed, &wire.ResponseError{Code: "server_error", Message: msg}) }
	if cancelRequested {
		end(wire.StatusCancelled, nil)
		return
	}
	if rec.Job.Attempts >= s.cfg.MaxAttempts {
		fail(fmt.Sprintf("The gateway restarted while this background response was running, after %d attempts; it is not retried again.", rec.Job.Attempts))
		return
	}
	req, err := wire.DecodeCreateRequest(rec.Job.Request)
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
	t.rec.Response.Status = wire.StatusQueued
	if err := s.store.DropEvents(s.ctx, id); err != nil {
		s.log.Warn("dropping old stream events failed", "response", id, "err", err)
	}
	if err := s.store.PutResponse(s.ctx, t.rec, true); err != nil {
		s.log.Error("re-queueing a background response failed", "response", id, "err", err)
		return
	}
	s.log.Info("re-queued an interrupted background response", "response", id, "attempt", rec.Job.Attempts+1)
	// Admitted whatever the caps: it was accepted before the restart.
	s.mu.Lock()
	s.holdLocked(rec.Tenant)
	s.mu.Unlock()
	j, r := s.newJob(t)
	r.emitResponse("response.created")
	r.emitResponse("response.queued")
	if !s.jobs.Run(id, j, s.runner(t, r, nil, trace.SpanContext{})) {
		s.unhold(rec.Tenant) // closing: it stays pending
	}
}
