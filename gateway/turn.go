package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/turns"
)

// turnInput is everything the gateway knows about one turn before routing
// it: who sent it, which session it continues, what it will cost.
type turnInput struct {
	// path and body are the engine request.
	path string
	body []byte
	// header is forwarded to the engine (may be nil); clientHeader is the
	// client's, read for session and priority hints.
	header, clientHeader http.Header

	model, tenant string
	// sessionKey is the derived session; "" for a sessionless turn.
	sessionKey string
	// prompt is the canonical prompt for prefix hashing; nil skips hashing.
	prompt *kv.Prompt

	promptTokens, maxOutputTokens int
	// serviceTier and background feed the band classifier.
	serviceTier string
	background  bool
}

// turn is a routed request in flight. Whoever holds it calls finish
// exactly once, after the engine's answer has been consumed.
type turn struct {
	s      *Server
	in     *turnInput
	route  *affinity.Request
	resp   *http.Response
	ep     *pools.Endpoint
	ticket turns.Ticket
	start  time.Time
	hashes *[]kv.BlockHash
	// firstData is when the engine's first streamed event arrived.
	firstData time.Time
	// touched: the session counted this turn, and hears when it ends.
	touched bool
	once    sync.Once
}

// hashBufs recycles the block-hash slices of routed prompts.
var hashBufs = sync.Pool{New: func() any { b := make([]kv.BlockHash, 0, 1024); return &b }}

// startTurn runs a turn through session tracking, flow control and
// routing, and sends it. On success the caller owns t.resp and must call
// t.finish; on error everything taken has been given back.
func (s *Server) startTurn(ctx context.Context, in *turnInput) (_ *turn, err error) {
	t := &turn{s: s, in: in, start: time.Now()}
	t.route = &affinity.Request{
		Model:                in.model,
		Tenant:               in.tenant,
		SessionKey:           in.sessionKey,
		PromptTokens:         in.promptTokens,
		ExpectedOutputTokens: in.maxOutputTokens,
	}
	// The session's history informs admission; the turn counts as one of
	// the session's only once admitted, so that a client retrying after
	// 429s does not look like a fast agent loop.
	var state sessions.State
	tracked := in.sessionKey != "" && s.opts.Sessions != nil
	if tracked {
		state, _ = s.opts.Sessions.Get(in.tenant, in.sessionKey, t.start)
	}
	defer func() {
		if err != nil {
			t.release(affinity.Outcome{Err: err}, false)
		}
	}()
	var tenant turns.Tenant
	if s.opts.Flow != nil {
		tenant = s.opts.Flow.Tenant(in.tenant)
	}
	band := turns.Classify(turns.ClassifyInput{
		DefaultBand: tenant.DefaultBand,
		MaxBand:     tenant.MaxBand,
		Priority:    in.clientHeader.Get("X-Turnpike-Priority"),
		ServiceTier: in.serviceTier,
		Background:  in.background,
	})
	t.route.Interactive = band == turns.Interactive
	if s.opts.Flow != nil {
		capacity := s.capacity[in.model]
		if capacity == nil {
			return t, s.modelNotFound(in.model)
		}
		ticket, err := s.opts.Flow.Acquire(ctx, &turns.Turn{
			Tenant:               in.tenant,
			Band:                 band,
			SessionKey:           in.sessionKey,
			Warm:                 state.Endpoint != "",
			SessionTurns:         state.Turns,
			MeanGap:              state.MeanGap,
			InputTokens:          in.promptTokens,
			ExpectedOutputTokens: in.maxOutputTokens,
			Enqueued:             t.start,
		}, capacity)
		if err != nil {
			return t, err
		}
		t.ticket = ticket
		t.route.Interactive = ticket.Band() == turns.Interactive
	}
	if tracked {
		s.opts.Sessions.Touch(in.tenant, in.sessionKey, time.Now())
		t.touched = true
	}
	if in.prompt != nil && s.needsHashes {
		t.hashes = hashBufs.Get().(*[]kv.BlockHash)
		*t.hashes = s.hasher.HashPrompt((*t.hashes)[:0], in.prompt)
		t.route.Hashes = *t.hashes
	}
	t.resp, t.ep, err = s.dispatch(ctx, &upstream{path: in.path, body: in.body, header: in.header, route: t.route})
	if err != nil {
		return t, err
	}
	return t, nil
}

// finish reports the turn's outcome to the policy, flow control and the
// session, and gives back what the turn held.
func (t *turn) finish(err error, u *usage) {
	var ttft time.Duration
	if !t.firstData.IsZero() {
		ttft = t.firstData.Sub(t.start)
	}
	t.release(outcome(err, u, ttft), true)
}

// sawData notes the arrival of the engine's first streamed event: the
// turn's time to first token, which feeds the policy's prefill estimate.
func (t *turn) sawData() {
	if t.firstData.IsZero() {
		t.firstData = time.Now()
	}
}

func (t *turn) release(o affinity.Outcome, dispatched bool) {
	t.once.Do(func() {
		if dispatched && t.ep != nil {
			t.s.policy.Done(t.route, t.ep, o)
		}
		// Quotas and fair shares are charged what the engine counted:
		// prompt plus generated tokens; -1 keeps the admission estimate.
		actual := -1
		if o.PromptTokens > 0 {
			actual = o.PromptTokens + o.CompletionTokens
		}
		t.ticket.Release(actual)
		if t.touched {
			t.s.opts.Sessions.Finish(t.in.tenant, t.in.sessionKey, time.Now())
		}
		if t.hashes != nil {
			t.route.Hashes = nil
			hashBufs.Put(t.hashes)
		}
	})
}

// retryableShed is a shed as the responses layer sees it: an engine
// refusal that says when to try again, so a background response waits
// instead of failing.
type retryableShed struct{ *turns.ShedError }

// RetryAfter is how long to wait before trying again.
func (r retryableShed) RetryAfter() time.Duration { return r.ShedError.RetryAfter }

// HTTPStatus is the status the shed was answered with (429, 503, 408).
func (r retryableShed) HTTPStatus() int { return r.Status }

func (r retryableShed) Unwrap() error { return r.ShedError }

// shedError turns flow control's verdict into the answer a client can act
// on: 429/503/408 with Retry-After and the reason.
func shedError(se *turns.ShedError) *apierror.Error {
	code := "rate_limit_exceeded"
	typ := apierror.TypeRateLimit
	msg := "The request was not admitted: " + se.Reason + ". Retry after the indicated delay."
	switch se.Status {
	case http.StatusServiceUnavailable:
		code, typ = "server_overloaded", apierror.TypeServer
	case http.StatusRequestTimeout:
		code, typ = "queue_timeout", apierror.TypeServer
		msg = "The request waited in the queue longer than its band allows."
	}
	return apierror.New(se.Status, code, "%s", msg).WithType(typ).WithClass(se).
		WithHeader("Retry-After", strconv.Itoa(se.RetryAfterSeconds())).
		WithHeader("X-Turnpike-Dropped-Reason", se.Reason)
}

// usageSniffer passes an engine's SSE stream through unchanged while
// noting the first event and the usage block, and finishes the turn when
// the stream ends: routing feedback for streams another package consumes.
type usageSniffer struct {
	io.ReadCloser
	t     *turn
	line  []byte
	usage *usage
	// done: the engine sent [DONE], so the answer is whole even if the
	// reader stops before the body's EOF.
	done bool
	once sync.Once
}

func (u *usageSniffer) Read(p []byte) (int, error) {
	n, err := u.ReadCloser.Read(p)
	for b := p[:n]; len(b) > 0; {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			u.line = append(u.line, b...)
			break
		}
		u.line = append(u.line, b[:i]...)
		u.scan(u.line)
		u.line = u.line[:0]
		b = b[i+1:]
	}
	if err != nil {
		var cause error
		if !errors.Is(err, io.EOF) {
			cause = err
		}
		u.once.Do(func() { u.t.finish(cause, u.usage) })
	}
	return n, err
}

func (u *usageSniffer) scan(line []byte) {
	ev := scanEvent(line)
	if ev.data {
		u.t.sawData()
	}
	if ev.usage != nil {
		u.usage = ev.usage
	}
	u.done = u.done || ev.done
}

func (u *usageSniffer) Close() error {
	u.once.Do(func() {
		var err error
		if !u.done {
			err = errStreamCut
		}
		u.t.finish(err, u.usage)
	})
	return u.ReadCloser.Close()
}

var errStreamCut = errors.New("gateway: stream closed before its end")

// sseEvent is what the gateway reads from one line of an engine's stream.
type sseEvent struct {
	// data: the line is a data line; done: it is the [DONE] sentinel.
	data, done bool
	// usage is the line's usage block, if it carries one.
	usage *usage
}

// scanEvent reads one line of an engine's chat or completion stream. The
// JSON is decoded only for lines that carry a usage block.
func scanEvent(line []byte) sseEvent {
	payload, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
	if !ok {
		return sseEvent{}
	}
	payload = bytes.TrimSpace(payload)
	ev := sseEvent{data: true, done: bytes.Equal(payload, []byte("[DONE]"))}
	if len(payload) > 0 && payload[0] == '{' && bytes.Contains(payload, []byte(`"usage"`)) {
		var chunk struct {
			Usage *usage `json:"usage"`
		}
		if json.Unmarshal(payload, &chunk) == nil {
			ev.usage = chunk.Usage
		}
	}
	return ev
}
