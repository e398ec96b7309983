package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/tracing"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Tracing of a turn. The caller's span in Begin's context is the turn's
// (tracing.StartTurn); the dispatcher adds the session as
// gen_ai.conversation.id and, at End, the engine's usage, and puts its
// own spans under it: admission, each pick, each engine request (a
// client span from send to the end of the answer, whose context the
// engine gets as traceparent), and for a disaggregated turn the prefill
// leg (its pick and engine request inside) and the decode leg. With the
// tracer off every call below is skipped or returns a span that records
// nothing, so no attribute is built.

// Attributes of turnpike's own spans.
const (
	attrEndpoint   = attribute.Key("turnpike.endpoint")
	attrCandidates = attribute.Key("turnpike.candidates")
	attrBand       = attribute.Key("turnpike.band")
	attrShed       = attribute.Key("turnpike.shed_reason")
	attrStatus     = attribute.Key("http.response.status_code")
	attrCached     = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	attrFallback   = attribute.Key("turnpike.pd.fallback")
)

// annotate names the session on the turn's span.
func (t *Turn) annotate() {
	span := trace.SpanFromContext(t.ctx)
	if t.sessionKey != "" && span.IsRecording() {
		span.SetAttributes(tracing.ConversationID.String(t.sessionKey))
	}
}

// endAdmission ends the admission span with the band or the refusal.
func endAdmission(span trace.Span, ticket turns.Ticket, err error) {
	if span.IsRecording() {
		if err == nil {
			span.SetAttributes(attrBand.String(ticket.Band().String()))
		} else if se, ok := errors.AsType[*ShedError](err); ok {
			span.SetAttributes(attrShed.String(se.Reason))
		}
		tracing.Fail(span, err)
	}
	span.End()
}

// pick is the policy's pick, traced.
func (t *Turn) pick(ctx context.Context, req *affinity.Request, eps []*pools.Endpoint) (*pools.Endpoint, error) {
	ctx, span := t.d.tr.Start(ctx, tracing.SpanPick, trace.SpanKindInternal)
	ep, err := t.d.policy.Pick(ctx, req, eps)
	if span.IsRecording() {
		span.SetAttributes(attrCandidates.Int(len(eps)))
		if ep != nil {
			span.SetAttributes(attrEndpoint.String(ep.ID))
		}
		tracing.Fail(span, err)
	}
	span.End()
	return ep, err
}

// traced is header with ctx's trace context added, a copy: header is
// shared by the turn's legs. Tracing off, it is header.
func (d *Dispatcher) traced(ctx context.Context, header http.Header) http.Header {
	if !d.tr.On() {
		return header
	}
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	d.tr.Inject(ctx, h)
	return h
}

// startEngine notes what the engine answered on its span and ends the
// span of a request that failed before an answer.
func startEngine(span trace.Span, ep *pools.Endpoint, resp *http.Response, err error) {
	if !span.IsRecording() {
		if err != nil {
			span.End()
		}
		return
	}
	span.SetAttributes(attrEndpoint.String(ep.ID))
	if err != nil {
		tracing.Fail(span, err)
		span.End()
		return
	}
	span.SetAttributes(attrStatus.Int(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
	}
}

// endPrefill ends the prefill leg's span.
func endPrefill(span trace.Span, ok bool) {
	if span.IsRecording() && !ok {
		span.SetAttributes(attrFallback.String(pdFallbackPrefillFailed))
	}
	span.End()
}

// endEngine ends the current leg's engine span, failed by err if not nil.
func (t *Turn) endEngine(err error) {
	if t.engine == nil {
		return
	}
	if t.engine.IsRecording() && t.responseID != "" {
		t.engine.SetAttributes(tracing.ResponseID.String(t.responseID))
	}
	tracing.Fail(t.engine, err)
	t.engine.End()
	t.engine = nil
}

// endSpans ends the turn's open spans and puts the engine's usage on the
// turn's span. It may run twice (End, then Begin's failure path).
func (t *Turn) endSpans(err error) {
	t.endEngine(err)
	if t.decode != nil {
		tracing.Fail(t.decode, err)
		t.decode.End()
		t.decode = nil
	}
	span := trace.SpanFromContext(t.ctx)
	if t.hasUsage && span.IsRecording() {
		span.SetAttributes(
			tracing.InputTokens.Int(t.usage.PromptTokens),
			tracing.OutputTokens.Int(t.usage.CompletionTokens),
			attrCached.Int(t.usage.PromptTokensDetails.CachedTokens),
		)
	}
}

// ResponseID is the id of the engine's answer (a chat completion's
// chatcmpl-…), read only while tracing; "" before the answer's first
// data or with tracing off.
func (t *Turn) ResponseID() string { return t.responseID }

// answerID reads the top-level "id" of a JSON answer or chunk.
func answerID(data []byte) string {
	if len(data) == 0 || data[0] != '{' || !bytes.Contains(data, []byte(`"id"`)) {
		return ""
	}
	var v struct {
		ID string `json:"id"`
	}
	json.Unmarshal(data, &v)
	return v.ID
}
