package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/jobs"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/state"
)

// job runs one batch in this process. Its goroutine (run) owns the batch
// until it ends or the service closes; every write of the batch's record
// goes through mu, so a client's cancel and the runner's progress never
// overwrite each other.
type job struct {
	s *Service

	mu sync.Mutex
	// protects rec, the batch's record as stored
	rec *batchRecord
}

// update changes the record with fn and stores it, with the extra writes
// of b, under the job's lock.
func (j *job) update(ctx context.Context, b *state.Batch, fn func(*Batch)) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	fn(&j.rec.Batch)
	if err := putBatch(b, j.rec, false); err != nil {
		return err
	}
	return j.s.store.ns.Apply(ctx, b)
}

func (j *job) snapshot() Batch {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rec.Batch
}

// requestCancel marks the batch cancelling and stops its requests; run
// then writes what was done and ends the batch cancelled.
func (j *job) requestCancel(ctx context.Context) (Batch, error) {
	now := j.s.now().Unix()
	cancel := false
	err := j.update(ctx, &state.Batch{Sync: true}, func(b *Batch) {
		// A batch already finalizing has run every request: it ends
		// completed.
		if b.Status == StatusValidating || b.Status == StatusInProgress {
			b.Status, b.CancellingAt = StatusCancelling, &now
			cancel = true
		}
	})
	if cancel && err == nil {
		j.s.jobs.Cancel(j.snapshot().ID)
	}
	return j.snapshot(), err
}

// run takes the batch from where its record says it is to its end. It
// returns early, leaving the batch for the next Start, when the service
// closes.
func (j *job) run(ctx context.Context) {
	s, id := j.s, j.snapshot().ID
	log := s.log.With("batch", id)
	// Reads and writes of the record use the service's context: a batch
	// whose window has passed or that was cancelled still ends in the
	// store.
	sctx := s.ctx
	lines, lerrs, err := j.load(sctx)
	if err != nil {
		if s.ctx.Err() == nil {
			log.Error("reading the batch's input failed", "err", err)
			j.fail(ctx, []*LineError{{Code: "input_unreadable", Message: "The input file could not be read: it may have been deleted."}})
		}
		return
	}
	if lerrs != nil {
		j.fail(ctx, lerrs)
		return
	}
	if st := j.snapshot().Status; st == StatusValidating {
		now := s.now().Unix()
		if err := j.update(sctx, &state.Batch{Sync: true}, func(b *Batch) {
			if b.Status == StatusValidating {
				b.Status, b.InProgressAt = StatusInProgress, &now
			}
			b.RequestCounts.Total = len(lines)
		}); err != nil {
			log.Warn("storing the batch's progress failed", "err", err)
			return
		}
	}
	if st := j.snapshot().Status; st == StatusInProgress || st == StatusCancelling {
		j.runLines(ctx, lines)
	}
	end := StatusCompleted
	switch {
	case s.ctx.Err() != nil, errors.Is(context.Cause(ctx), jobs.ErrLeaseLost):
		// Close, or another gateway holds the lease now: the batch stays
		// for whoever holds it next.
		return
	case errors.Is(context.Cause(ctx), jobs.ErrCancelled):
		end = StatusCancelled
	case ctx.Err() != nil:
		end = StatusExpired
	}
	if err := j.finalize(lines, end); err != nil && s.ctx.Err() == nil {
		log.Error("finalizing the batch failed", "err", err)
	}
}

// load reads and parses the batch's input file.
func (j *job) load(ctx context.Context) ([]*Line, []*LineError, error) {
	b := j.snapshot()
	rec, err := j.s.store.file(ctx, "", b.InputFileID)
	if err != nil {
		return nil, nil, err
	}
	content, err := j.s.store.content(ctx, rec)
	if err != nil {
		return nil, nil, err
	}
	lines, lerrs := parseFile(content, b.Endpoint, j.s.opts.MaxRequests, maxValidationErrors)
	return lines, lerrs, nil
}

func (j *job) fail(ctx context.Context, errs []*LineError) {
	now := j.s.now().Unix()
	err := j.update(context.WithoutCancel(ctx), &state.Batch{Sync: true}, func(b *Batch) {
		b.Status, b.FailedAt = StatusFailed, &now
		b.Errors = &Errors{Object: "list", Data: errs}
	})
	if err != nil {
		j.s.log.Warn("storing a failed batch failed", "batch", j.rec.Batch.ID, "err", err)
	}
	j.s.metrics.batches.WithLabelValues(StatusFailed).Inc()
}

// runLines runs the requests that have no result yet, at most
// Concurrency of all batches at once, until all have one or ctx ends.
func (j *job) runLines(ctx context.Context, lines []*Line) {
	s := j.s
	done := make([]bool, len(lines))
	err := s.store.results(s.ctx, j.snapshot().ID, func(line int, _ bool, _ []byte) error {
		if line < len(done) {
			done[line] = true
		}
		return nil
	})
	if err != nil {
		s.log.Warn("reading the batch's results failed", "batch", j.snapshot().ID, "err", err)
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, l := range lines {
		if done[i] {
			continue
		}
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.slots }()
			j.runLine(ctx, i, l)
		}()
	}
}

// runLine runs one request and stores its result; a request whose batch
// ended first stores none.
func (j *job) runLine(ctx context.Context, i int, l *Line) {
	s := j.s
	s.metrics.inFlight.Inc()
	defer s.metrics.inFlight.Dec()
	out := OutputLine{ID: newID("batch_req_", s.now()), CustomID: l.CustomID}
	status, body, usage, ok := j.call(ctx, l, out.ID)
	if !ok {
		return
	}
	out.Response = &OutputResponse{StatusCode: status, RequestID: out.ID, Body: body}
	v, err := json.Marshal(&out)
	if err != nil {
		s.log.Error("encoding a result failed", "err", err)
		return
	}
	success := status >= 200 && status < 300
	flag := byte('e')
	if success {
		flag = 'o'
	}
	var b state.Batch
	b.Put(resultKey(j.snapshot().ID, i), append([]byte{flag}, v...))
	err = j.update(context.WithoutCancel(ctx), &b, func(bt *Batch) {
		if success {
			bt.RequestCounts.Completed++
		} else {
			bt.RequestCounts.Failed++
		}
		addUsage(&bt.Usage, usage)
	})
	if err != nil {
		s.log.Warn("storing a result failed; the request will run again", "batch", j.snapshot().ID, "err", err)
		return
	}
	result := "completed"
	if !success {
		result = "failed"
	}
	s.metrics.requests.WithLabelValues(result).Inc()
}

func addUsage(u *Usage, d *dispatch.Usage) {
	if d == nil {
		return
	}
	u.InputTokens += d.PromptTokens
	u.InputTokensDetails.CachedTokens += d.PromptTokensDetails.CachedTokens
	u.OutputTokens += d.CompletionTokens
	u.OutputTokensDetails.ReasoningTokens += d.CompletionTokensDetails.ReasoningTokens
	u.TotalTokens += d.PromptTokens + d.CompletionTokens
}

// Kinds of answer a request ends with.
const (
	kindCompleted = "completed"
	// kindInvalid: the gateway refused the request before any engine saw
	// it (a malformed body, an unknown model, stream: true).
	kindInvalid = "invalid_request"
	// kindRefused: an engine answered with a 4xx.
	kindRefused = "refused"
	// kindEngine: the fleet failed the request as often as allowed.
	kindEngine = "engine_error"
)

// answer is what a request ended with.
type answer struct {
	status int
	body   []byte
	usage  *dispatch.Usage
	kind   string
}

func errorAnswer(ae *apierror.Error, kind string) answer {
	return answer{status: ae.Status, body: ae.Body(), kind: kind}
}

// call runs a job's request: see Service.call.
func (j *job) call(ctx context.Context, l *Line, reqID string) (status int, body []byte, usage *dispatch.Usage, ok bool) {
	a, ok := j.s.call(ctx, j.rec.Tenant, "", l, reqID)
	return a.status, a.body, a.usage, ok
}

// call sends a request of tenant through the turn path as a background
// turn (or in band, when not "") until it has an answer to keep: the
// engine's, or the error that ends it. A shed is retried after its
// Retry-After for as long as ctx lasts; a failure on the fleet's side
// MaxRetries times. ok is false when ctx ended first.
func (s *Service) call(ctx context.Context, tenant, band string, l *Line, reqID string) (answer, bool) {
	parse := prompt.ParseChat
	if l.URL == EndpointCompletions {
		parse = prompt.ParseCompletion
	}
	req, err := parse(l.Body)
	if err != nil {
		return errorAnswer(lineAPIError(err), kindInvalid), true
	}
	if req.Stream {
		return errorAnswer(apierror.Invalid("stream", "invalid_value", "Streaming is not supported here: leave 'stream' out or false."), kindInvalid), true
	}
	header := http.Header{"X-Request-Id": {reqID}}
	if band != "" {
		header.Set(dispatch.PriorityHeader, band)
	}
	failures := 0
	for attempt := 0; ; attempt++ {
		spec := &dispatch.Spec{
			Tenant: tenant, Model: req.Model, Path: l.URL, Body: l.Body, ClientHeader: header,
			PromptCacheKey: req.PromptCacheKey, SafetyIdentifier: req.SafetyIdentifier,
			// The requests take the lowest band (or the one asked) whatever
			// their service_tier says: they run on slack capacity.
			ServiceTier: "flex", Background: band == "",
			Prompt: &req.Prompt, Tokens: req.TokenIDs, MaxOutputTokens: req.MaxOutputTokens(),
		}
		if band != "" {
			spec.ServiceTier = ""
		}
		t, err := s.opts.Dispatch.Begin(ctx, spec)
		if err == nil {
			var b []byte
			b, err = t.ReadAll()
			u, has := t.Usage()
			t.End(err)
			if err == nil {
				a := answer{status: http.StatusOK, body: b, kind: kindCompleted}
				if has {
					a.usage = &u
				}
				return a, true
			}
		}
		if ctx.Err() != nil {
			return answer{}, false
		}
		wait, retry, final, kind := s.classify(err, attempt)
		if !retry {
			return errorAnswer(final, kind), true
		}
		if wait == 0 {
			if failures++; failures > s.opts.MaxRetries {
				return errorAnswer(final, kind), true
			}
			wait = s.backoff(failures)
			s.metrics.retries.WithLabelValues("engine").Inc()
		} else {
			s.metrics.retries.WithLabelValues("shed").Inc()
		}
		if !jobs.Sleep(ctx, jobs.Wall, wait) {
			return answer{}, false
		}
	}
}

// classify says what to do after a failed attempt: retry after a shed's
// wait (wait > 0, not counted against MaxRetries), retry as a failure
// (wait 0), or keep final (of kind) as the request's answer. final is
// also the answer once retries run out.
func (s *Service) classify(err error, attempt int) (wait time.Duration, retry bool, final *apierror.Error, kind string) {
	final, ok := dispatch.APIError(err)
	if !ok {
		return 0, true, apierror.New(http.StatusBadGateway, "upstream_error", "The model server could not answer: no endpoint took the request."), kindEngine
	}
	var se *dispatch.ShedError
	if errors.As(err, &se) {
		return max(se.RetryAfter, s.backoff(min(attempt, 6))), true, final, kindEngine
	}
	var ee *dispatch.EngineError
	if errors.As(err, &ee) {
		switch {
		case ee.Status == http.StatusTooManyRequests:
			return s.backoff(min(attempt, 6)), true, final, kindEngine
		case ee.Status >= 400 && ee.Status < 500:
			return 0, false, final, kindRefused
		}
		return 0, true, final, kindEngine
	}
	if lineAPIError(err) != nil {
		return 0, false, final, kindInvalid
	}
	return 0, true, final, kindEngine
}

// lineAPIError is the answer kept for a request the gateway refused
// before any engine saw it; nil for an error that is not of that kind.
func lineAPIError(err error) *apierror.Error {
	var fe *prompt.FieldError
	if errors.As(err, &fe) || errors.Is(err, dispatch.ErrModelNotFound) {
		ae, _ := dispatch.APIError(err)
		return ae
	}
	return nil
}

// backoff is the wait before the n-th retry: RetryBackoff doubled n-1
// times, at most MaxBackoff, less up to a quarter (jobs.Backoff).
func (s *Service) backoff(n int) time.Duration {
	return jobs.Backoff{First: s.opts.RetryBackoff, Max: s.opts.MaxBackoff}.Delay(n)
}

// finalize writes the output and error files from the stored results
// (and, for a batch that ended early, an error line for each request that
// did not run), deletes the results and ends the batch in status end, in
// one write.
func (j *job) finalize(lines []*Line, end string) error {
	s := j.s
	ctx := context.WithoutCancel(s.ctx)
	now := s.now()
	if end == StatusCompleted {
		ts := now.Unix()
		if err := j.update(ctx, &state.Batch{Sync: true}, func(b *Batch) { b.Status, b.FinalizingAt = StatusFinalizing, &ts }); err != nil {
			return err
		}
	}
	id := j.snapshot().ID
	var okBuf, errBuf bytes.Buffer
	ran := make([]bool, len(lines))
	err := s.store.results(ctx, id, func(line int, ok bool, out []byte) error {
		if line < len(ran) {
			ran[line] = true
		}
		buf := &errBuf
		if ok {
			buf = &okBuf
		}
		buf.Write(out)
		buf.WriteByte('\n')
		return nil
	})
	if err != nil {
		return err
	}
	unrun := 0
	code, msg := "batch_expired", "This request could not be executed before the completion window expired."
	if end == StatusCancelled {
		code, msg = "batch_cancelled", "This request was not executed: the batch was cancelled."
	}
	for i, l := range lines {
		if ran[i] {
			continue
		}
		unrun++
		v, _ := json.Marshal(OutputLine{ID: newID("batch_req_", now), CustomID: l.CustomID, Error: &OutputError{Code: code, Message: msg}})
		errBuf.Write(v)
		errBuf.WriteByte('\n')
	}
	var b state.Batch
	b.Sync = true
	var outID, errID *string
	for _, f := range []struct {
		buf  *bytes.Buffer
		id   **string
		name string
	}{{&okBuf, &outID, "batch_" + id + "_output.jsonl"}, {&errBuf, &errID, "batch_" + id + "_error.jsonl"}} {
		if f.buf.Len() == 0 {
			continue
		}
		rec := &fileRecord{Tenant: j.rec.Tenant, File: File{
			ID: newID("file-", now), Object: "file", Bytes: int64(f.buf.Len()), CreatedAt: now.Unix(),
			ExpiresAt: ptr(now.Add(s.opts.FileRetention).Unix()), Filename: f.name, Purpose: PurposeBatchOutput, Status: "processed",
		}}
		if err := s.store.putFile(ctx, rec, f.buf.Bytes(), &b); err != nil {
			return err
		}
		*f.id = &rec.File.ID
	}
	b.DeletePrefix(resultPrefix(id))
	b.Delete(jobKeys.CancelKey(id))
	ts := now.Unix()
	err = j.update(ctx, &b, func(bt *Batch) {
		bt.Status, bt.OutputFileID, bt.ErrorFileID = end, outID, errID
		bt.RequestCounts.Total = len(lines)
		bt.RequestCounts.Failed += unrun
		switch end {
		case StatusCompleted:
			bt.CompletedAt = &ts
		case StatusCancelled:
			bt.CancelledAt = &ts
		case StatusExpired:
			bt.ExpiredAt = &ts
		}
	})
	if err == nil {
		s.metrics.batches.WithLabelValues(end).Inc()
	}
	return err
}
