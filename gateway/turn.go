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
	once      sync.Once
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
	var state sessions.State
	if in.sessionKey != "" && s.opts.Sessions != nil {
		state = s.opts.Sessions.Touch(in.tenant, in.sessionKey, t.start)
	}
	defer func() {
		if err != nil {
			t.release(affinity.Outcome{Err: err}, false)
		}
	}()
	if s.opts.Flow != nil {
		pool := s.poolFor(in.model)
		if pool == nil {
			return t, s.modelNotFound(in.model)
		}
		tn := s.tenantSettings(in.tenant)
		band := turns.Classify(turns.ClassifyInput{
			DefaultBand: tn.DefaultBand,
			MaxBand:     tn.MaxBand,
			Priority:    in.clientHeader.Get("X-Turnpike-Priority"),
			ServiceTier: in.serviceTier,
			Background:  in.background,
		})
		ticket, err := s.opts.Flow.Acquire(ctx, &turns.Turn{
			Tenant:               in.tenant,
			Band:                 band,
			SessionKey:           in.sessionKey,
			Warm:                 state.Endpoint != "",
			SessionTurns:         max(state.Turns-1, 0),
			MeanGap:              state.MeanGap,
			InputTokens:          in.promptTokens,
			ExpectedOutputTokens: in.maxOutputTokens,
			Enqueued:             t.start,
		}, turns.PoolCapacity{Pool: pool})
		if err != nil {
			return t, err
		}
		t.ticket = ticket
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
		actual := -1
		if o.PromptTokens > 0 {
			actual = o.PromptTokens
		}
		t.ticket.Release(actual)
		if t.in.sessionKey != "" && t.s.opts.Sessions != nil {
			t.s.opts.Sessions.Finish(t.in.tenant, t.in.sessionKey, time.Now())
		}
		if t.hashes != nil {
			t.route.Hashes = nil
			hashBufs.Put(t.hashes)
		}
	})
}

// poolFor is the pool whose capacity admits a turn for model: the first
// pool serving it whole.
func (s *Server) poolFor(model string) *pools.Pool {
	for _, p := range s.reg.Pools {
		if p.Config.Role == pools.RoleBoth && p.Serves(model) {
			return p
		}
	}
	return nil
}

func (s *Server) tenantSettings(name string) turns.Tenant {
	return s.opts.Flow.Tenant(name)
}

// shedError turns flow control's verdict into the answer a client can act
// on: 429/503/408 with Retry-After and the reason.
func shedError(se *turns.ShedError) *APIError {
	code := "rate_limit_exceeded"
	typ := "rate_limit_error"
	msg := "The request was not admitted: " + se.Reason + ". Retry after the indicated delay."
	switch se.Status {
	case http.StatusServiceUnavailable:
		code, typ = "server_overloaded", "server_error"
	case http.StatusRequestTimeout:
		code, typ = "queue_timeout", "server_error"
		msg = "The request waited in the queue longer than its band allows."
	}
	return &APIError{
		Status: se.Status, Type: typ, Code: strp(code), Message: msg,
		Header: http.Header{
			"Retry-After":               {strconv.Itoa(se.RetryAfterSeconds())},
			"X-Turnpike-Dropped-Reason": {se.Reason},
		},
	}
}

// usageSniffer passes an engine's SSE stream through unchanged while
// noting the first event and the usage block, and finishes the turn when
// the stream ends: routing feedback for streams another package consumes.
type usageSniffer struct {
	io.ReadCloser
	t     *turn
	line  []byte
	usage *usage
	once  sync.Once
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
	if bytes.HasPrefix(line, []byte("data: ")) {
		u.t.sawData()
	}
	if !bytes.HasPrefix(line, []byte("data: {")) || !bytes.Contains(line, []byte(`"usage":{`)) {
		return
	}
	var chunk struct {
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(line[len("data: "):], &chunk) == nil && chunk.Usage != nil {
		u.usage = chunk.Usage
	}
}

func (u *usageSniffer) Close() error {
	u.once.Do(func() { u.t.finish(errors.New("gateway: stream closed before its end"), u.usage) })
	return u.ReadCloser.Close()
}

// sessionHeaders are the client headers that name a session.
var sessionHeaders = sessions.Headers
