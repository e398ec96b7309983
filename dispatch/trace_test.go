package dispatch

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/tracing"
)

// TestTracePDLegs: a disaggregated turn's spans are a prefill leg holding
// its pick and engine request and a decode leg holding its engine
// request, both under the turn's span; each engine was sent the
// traceparent of its own request's span.
func TestTracePDLegs(t *testing.T) {
	f := newPDFixture(t, 1, 1, sim.Config{})
	exp := tracetest.NewInMemoryExporter()
	p := tracing.NewSyncer(exp, tracing.Config{})
	defer p.Close(context.Background())
	tr := p.Tracer()
	d, err := New(Options{Registry: f.d.reg, Policy: f.d.policy, PD: &f.d.pd, Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	ctx, turn := tr.StartTurn(t.Context(), tracing.OpChat, testModel)
	dt, err := d.Begin(ctx, pdSpec(longPrompt(3, 2000), true, `,"stream_options":{"include_usage":true}`))
	if err != nil {
		t.Fatal(err)
	}
	_, u := readTurn(t, dt, true)
	dt.End(nil)
	turn.End()

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	parentName := func(s tracetest.SpanStub) string { return byID[s.Parent.SpanID()].Name }
	var got []string
	var prefillEngine, decodeEngine trace.SpanID
	for _, s := range spans {
		got = append(got, parentName(s)+">"+s.Name)
		if s.Name == tracing.SpanEngine {
			switch parentName(s) {
			case tracing.SpanPrefill:
				prefillEngine = s.SpanContext.SpanID()
			case tracing.SpanDecode:
				decodeEngine = s.SpanContext.SpanID()
			}
		}
	}
	joined := strings.Join(got, " ")
	for _, want := range []string{
		"chat " + testModel + ">" + tracing.SpanPick, // the decoder
		"chat " + testModel + ">" + tracing.SpanPrefill,
		tracing.SpanPrefill + ">" + tracing.SpanPick,
		tracing.SpanPrefill + ">" + tracing.SpanEngine,
		"chat " + testModel + ">" + tracing.SpanDecode,
		tracing.SpanDecode + ">" + tracing.SpanEngine,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no span %s; spans (parent>name): %s", want, joined)
		}
	}
	pl, dl := f.prefill[0].received(), f.decode[0].received()
	if len(pl) != 1 || len(dl) != 1 {
		t.Fatalf("%d prefill legs, %d decode legs", len(pl), len(dl))
	}
	if !strings.Contains(pl[0].traceparent, prefillEngine.String()) || !prefillEngine.IsValid() {
		t.Errorf("prefiller saw traceparent %q, want its span %s", pl[0].traceparent, prefillEngine)
	}
	if !strings.Contains(dl[0].traceparent, decodeEngine.String()) || !decodeEngine.IsValid() {
		t.Errorf("decoder saw traceparent %q, want its span %s", dl[0].traceparent, decodeEngine)
	}
	var turnSpan tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "chat "+testModel {
			turnSpan = s
		}
	}
	in := map[string]int64{}
	for _, kv := range turnSpan.Attributes {
		in[string(kv.Key)] = kv.Value.AsInt64()
	}
	if in[string(tracing.InputTokens)] != int64(u.PromptTokens) || in[string(tracing.OutputTokens)] != 12 {
		t.Errorf("turn span usage %v, want the turn's %+v", turnSpan.Attributes, u)
	}
}
