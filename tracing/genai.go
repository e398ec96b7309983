package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Attribute names of the OpenTelemetry semantic conventions for
// generative AI (gen_ai.provider.name replaced gen_ai.system).
const (
	OperationName  = attribute.Key("gen_ai.operation.name")
	ProviderName   = attribute.Key("gen_ai.provider.name")
	RequestModel   = attribute.Key("gen_ai.request.model")
	ResponseModel  = attribute.Key("gen_ai.response.model")
	ConversationID = attribute.Key("gen_ai.conversation.id")
	ResponseID     = attribute.Key("gen_ai.response.id")
	InputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	OutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	// RequestMaxTokens is the output budget the client asked for.
	RequestMaxTokens = attribute.Key("gen_ai.request.max_tokens")
)

// Operation names of the turn span.
const (
	OpChat           = "chat"
	OpTextCompletion = "text_completion"
	// OpResponses is a turn of the Responses API.
	OpResponses = "responses"
)

// ProviderTurnpike is the gen_ai.provider.name turnpike reports: the gateway
// answers the OpenAI API itself in front of its own engines.
const ProviderTurnpike = "turnpike"

// Span names of the turn's children.
const (
	SpanAdmission = "turnpike.admission"
	SpanPick      = "turnpike.pick"
	SpanEngine    = "turnpike.engine"
	SpanPrefill   = "turnpike.prefill"
	SpanDecode    = "turnpike.decode"
	SpanStateLoad = "turnpike.state.load"
	SpanStateSave = "turnpike.state.save"
)

// Background marks the span of a turn that runs on without its client: a
// background response, started by a request whose span it links to.
const Background = attribute.Key("turnpike.background")

// StartJob starts the span of a background turn: the root of a trace of
// its own, since it outlives the request that created it, linked to that
// request's span when link is valid (a job taken over after a restart
// has none).
func (t *Tracer) StartJob(ctx context.Context, op, model string, link trace.SpanContext) (context.Context, trace.Span) {
	if t == nil {
		return ctx, off
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)}
	if link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: link}))
	}
	ctx, span := t.t.Start(ctx, op+" "+model, opts...)
	span.SetAttributes(OperationName.String(op), ProviderName.String(ProviderTurnpike), RequestModel.String(model), Background.Bool(true))
	return ctx, span
}

// StartTurn starts the span of one turn, named "{operation} {model}" as
// the conventions ask, with the operation, provider and model set; its
// parent is ctx's span, or the client's (Extract), else it is a root.
func (t *Tracer) StartTurn(ctx context.Context, op, model string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, off
	}
	ctx, span := t.t.Start(ctx, op+" "+model, trace.WithSpanKind(trace.SpanKindServer))
	span.SetAttributes(OperationName.String(op), ProviderName.String(ProviderTurnpike), RequestModel.String(model))
	return ctx, span
}
