package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/tracing"
	"go.opentelemetry.io/otel/trace"
)

// SGLang's flavour of prefill/decode disaggregation, for a decoder whose
// pool has engine sglang (prefillers pair only with decoders of their own
// protocol). After the decoder and the decider, as for vLLM:
//
//  1. a prefiller is picked (prefix and prefill queue) and a room drawn:
//     a random 63-bit integer;
//  2. both legs go out at once, each the client's body with
//     bootstrap_host (the prefiller's host), bootstrap_port (its
//     endpoint's bootstrapPort, default 8998) and bootstrap_room. The
//     decode leg is otherwise the client's bytes and its answer is the
//     turn's; the prefill leg is sent with stream false and no
//     stream_options, and its answer, read whole, is discarded but for
//     its usage (the cached tokens the client is told) and its status.
//
// Both carry the same X-Request-Id. Failures, as far as SGLang's protocol
// lets them mirror vLLM's:
//
//   - The prefill leg fails (a status other than 200, a connection
//     failure, the prefill timeout) before the decoder answered: the
//     decode leg is cancelled and the client's body, without bootstrap
//     fields, is sent to the same decoder first (the usual retries
//     after it): the decoder prefills the turn itself. The prefill leg is
//     not retried elsewhere: the decode leg names its prefiller.
//   - The prefill leg fails after the decoder answered: the decoder's
//     answer stands (it has the KV, or its own stream ends in error).
//   - The decoder fails before its first byte (a connection failure, a
//     5xx): the decode leg, room and all, goes to another decoder, which
//     claims the same room.
//   - The decoder refuses the bootstrap fields (a 400 naming a
//     bootstrap_* parameter: the room never arrived, the prefiller was
//     unreachable): the prefill leg is cancelled and the decoder
//     prefills, as above.

// sglangPrefill is an SGLang prefill leg, run by its own goroutine beside
// the decode leg. done is closed when the leg ended; err, cached and at
// are then read-only.
type sglangPrefill struct {
	done   chan struct{}
	err    error
	cached int
	// at is when the prefill answered.
	at time.Time

	// cancelPrefill ends the prefill leg; it is safe to call again.
	cancelPrefill context.CancelFunc

	mu sync.Mutex
	// protects the fields below
	// answered: the decode leg answered, so a prefill failure no longer
	// cancels it.
	answered bool
	// failedEarly: the prefill failed before that and cancelled it.
	failedEarly bool
	// cancel ends the decode leg's context; called once the turn is over.
	cancel context.CancelFunc
}

// cancelDecode ends the decode leg's context.
func (l *sglangPrefill) cancelDecode() { l.cancel() }

// sglangSettled waits for the SGLang prefill leg (it ends by the prefill
// timeout at the latest) and takes its cached tokens; false when it
// failed, leaving the decoder's usage as it reported it.
func (p *pdLeg) sglangSettled() bool {
	<-p.sglang.done
	if p.sglang.err != nil {
		return false
	}
	p.cached, p.prefilled = p.sglang.cached, p.sglang.at
	return true
}

// newRoom draws a bootstrap room: SGLang's rooms are 63-bit.
func newRoom() uint64 { return rand.Uint64() & math.MaxInt64 }

// sglangBodies are the decode and prefill legs of a request body: body
// with the bootstrap fields naming host, port and room (in place of any
// the client sent); the prefill leg also with stream false and no
// stream_options.
func sglangBodies(body []byte, host string, port int, room uint64) (decode, prefill []byte, err error) {
	h, _ := json.Marshal(host)
	set := []jsonscan.Member{
		{Key: "bootstrap_host", Value: h},
		{Key: "bootstrap_port", Value: strconv.AppendInt(nil, int64(port), 10)},
		{Key: "bootstrap_room", Value: strconv.AppendUint(nil, room, 10)},
	}
	if decode, err = jsonscan.Edit(body, set); err != nil {
		return nil, nil, err
	}
	prefill, err = jsonscan.Edit(body, append(set, jsonscan.Member{Key: "stream", Value: []byte("false")}), "stream_options")
	return decode, prefill, err
}

// sendSGLang runs a disaggregated turn of an SGLang decoder: both legs at
// once, the decode leg's answer the turn's. It leaves t as send does.
func (t *Turn) sendSGLang(ctx context.Context, decoder *pools.Endpoint, prefillers []*pools.Endpoint) error {
	d, spec := t.d, t.spec
	local := func(reason string) error {
		d.pdm.fallbacks.WithLabelValues(pdSGLang, reason).Inc()
		t.pd = nil
		t.picked = decoder
		return t.send(ctx, spec.Body, nil)
	}
	if !jsonscan.IsObject(spec.Body) {
		// Not an object: the engine says what is wrong with it.
		t.picked = decoder
		return t.send(ctx, spec.Body, nil)
	}
	req := t.prefillRequest()
	pctx, span := d.tr.Start(ctx, tracing.SpanPrefill, trace.SpanKindInternal)
	prefiller, err := t.pick(pctx, &req, prefillers)
	if err != nil {
		endPrefill(span, false)
		return local(pdFallbackPrefillFailed)
	}
	decodeB, prefillB, err := sglangBodies(spec.Body, prefiller.URL.Hostname(), prefiller.BootstrapPort, newRoom())
	if err != nil {
		d.policy.Done(&req, prefiller, affinity.Outcome{Err: err})
		endPrefill(span, false)
		return local(pdFallbackPrefillFailed)
	}
	dctx, cancelDecode := context.WithCancel(ctx)
	pctx, cancelPrefill := context.WithTimeout(pctx, d.pd.PrefillTimeout)
	leg := &sglangPrefill{done: make(chan struct{}), cancel: cancelDecode, cancelPrefill: cancelPrefill}
	go t.runSGLangPrefill(pctx, span, prefiller, req, prefillB, leg)

	t.pd = &pdLeg{prefiller: prefiller, decodeSent: time.Now(), flavor: pdSGLang, sglang: leg}
	dctx, t.decode = d.tr.Start(dctx, tracing.SpanDecode, trace.SpanKindInternal)
	t.picked = decoder
	err = t.send(dctx, decodeB, nil)
	leg.mu.Lock()
	leg.answered = true
	early := leg.failedEarly
	leg.mu.Unlock()
	switch {
	case early:
		// The decode leg was cancelled, or answered just before it would
		// have been: the decoder may lack the KV either way.
		if err == nil {
			t.dropAnswer(context.Canceled)
		}
		cancelDecode()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.log.Info("SGLang prefill leg failed; the decoder prefills the turn", "prefiller", prefiller.ID, "err", leg.err)
		return local(pdFallbackPrefillFailed)
	case err != nil:
		cancelDecode()
		cancelPrefill()
		t.pd = nil
		return err
	case t.resp.StatusCode == http.StatusBadRequest:
		ee := readEngineError(t.resp)
		t.dropAnswer(ee)
		cancelDecode()
		cancelPrefill()
		if !strings.HasPrefix(ee.Param, "bootstrap_") {
			t.pd = nil
			return ee
		}
		d.log.Info("decoder refused the bootstrap room; it prefills the turn", "cause", ee.Message)
		return local(pdFallbackKVRefused)
	}
	return nil
}

// runSGLangPrefill sends the prefill leg to ep, reads its answer whole and
// keeps what the turn needs of it in leg. A failure before the decode leg
// answered cancels the decode leg.
func (t *Turn) runSGLangPrefill(ctx context.Context, span trace.Span, ep *pools.Endpoint, req affinity.Request, body []byte, leg *sglangPrefill) {
	defer close(leg.done)
	defer leg.cancelPrefill()
	d := t.d
	start := time.Now()
	usage, err := t.drainPrefill(ctx, ep, body, int64(req.PromptTokens+1))
	endPrefill(span, err == nil)
	if err == nil {
		t.prefillDone(&req, ep, usage, time.Since(start), pdSGLang)
		leg.cached, leg.at = usage.PromptTokensDetails.CachedTokens, time.Now()
		return
	}
	d.policy.Done(&req, ep, affinity.Outcome{Err: err})
	leg.err = err
	leg.mu.Lock()
	if !leg.answered {
		leg.failedEarly = true
		leg.cancel()
	}
	leg.mu.Unlock()
}

// drainPrefill sends an SGLang prefill leg and reads its answer: the
// usage of a 200, the engine's error otherwise.
func (t *Turn) drainPrefill(ctx context.Context, ep *pools.Endpoint, body []byte, tokens int64) (Usage, error) {
	ctx, span := t.d.tr.Start(ctx, tracing.SpanEngine, trace.SpanKindClient)
	resp, err := t.d.reg.Client().Send(ctx, ep, t.spec.Path, t.withPriority(ep, body), t.d.traced(ctx, t.header), tokens)
	startEngine(span, ep, resp, err)
	defer span.End()
	if err != nil {
		return Usage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Usage{}, readEngineError(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	if err != nil {
		return Usage{}, fmt.Errorf("%w: reading %s: %w", pools.ErrUpstream, ep.ID, err)
	}
	u, _ := parseUsage(b)
	return u, nil
}
