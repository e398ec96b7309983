package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Defaults of Config.
const (
	DefaultServiceName = "turnpike"
	DefaultSampleRatio = 1.0
	// ProtocolHTTP is OTLP over HTTP with protobuf bodies, the only
	// protocol turnpike exports with (the OTLP default, port 4318).
	ProtocolHTTP = "http/protobuf"
	// EnvEndpoint names the standard variable that turns tracing on when
	// the config names no endpoint.
	EnvEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	// envTracesEndpoint is the traces-only variant of EnvEndpoint.
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// Config is the tracing section of the config file.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL, e.g.
	// http://127.0.0.1:4318; spans go to its /v1/traces unless the URL
	// has a path of its own. Default "": OTEL_EXPORTER_OTLP_ENDPOINT (or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) if set, else tracing is off.
	Endpoint string `yaml:"endpoint"`
	// Protocol is the OTLP protocol. Default and only value
	// http/protobuf.
	Protocol string `yaml:"protocol"`
	// SampleRatio is the share of new traces sampled, in [0,1]; a trace
	// whose client sent a sampled traceparent is always sampled. Default
	// 1.
	SampleRatio *float64 `yaml:"sampleRatio"`
	// ServiceName is the service.name resource attribute. Default
	// turnpike.
	ServiceName string `yaml:"serviceName"`
}

// EnsureDefaults fills unset fields.
func (c *Config) EnsureDefaults() {
	if c.Protocol == "" {
		c.Protocol = ProtocolHTTP
	}
	if c.SampleRatio == nil {
		r := DefaultSampleRatio
		c.SampleRatio = &r
	}
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Protocol != ProtocolHTTP {
		errs = append(errs, fmt.Errorf("tracing: protocol %q is not supported; use %s (the collector's OTLP/HTTP port, 4318 by default)", c.Protocol, ProtocolHTTP))
	}
	if r := c.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		errs = append(errs, fmt.Errorf("tracing: sampleRatio %v is outside [0,1]", *r))
	}
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("tracing: endpoint %q is not an http:// or https:// URL", c.Endpoint))
		}
	}
	return errors.Join(errs...)
}

// Enabled reports whether the config or the environment names an
// endpoint.
func (c *Config) Enabled() bool {
	return c.Endpoint != "" || os.Getenv(EnvEndpoint) != "" || os.Getenv(envTracesEndpoint) != ""
}

// Provider is the tracer provider built from a Config, with its exporter.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// New builds the OTLP/HTTP exporter and tracer provider of cfg; it
// returns a nil Provider, and no error, when tracing is off. The
// exporter connects lazily: a collector that is down costs dropped
// spans, never a failed start. Failed exports are counted in
// turnpike_tracing_export_errors_total on metrics (when not nil) and
// logged by log (nil: slog.Default()); OpenTelemetry reports them to
// one process-wide handler, which New sets.
func New(ctx context.Context, cfg Config, metrics prometheus.Registerer, log *slog.Logger) (*Provider, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	errs := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "turnpike_tracing_export_errors_total",
		Help: "Errors OpenTelemetry reported while exporting spans (a collector down or refusing them); the spans of a failed export are dropped.",
	})
	if metrics != nil {
		if err := metrics.Register(errs); err != nil {
			return nil, fmt.Errorf("tracing: %w", err)
		}
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		errs.Inc()
		log.Warn("tracing: exporting spans failed", "err", err)
	}))
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(tracesURL(cfg.Endpoint)))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return NewWithExporter(exp, cfg), nil
}

// NewWithExporter builds a provider that sends to exp, batched, with cfg's
// sampler and service name (defaults filled). Tests pass an in-memory
// exporter.
func NewWithExporter(exp sdktrace.SpanExporter, cfg Config) *Provider {
	return newProvider(sdktrace.WithBatcher(exp), cfg)
}

// NewSyncer is NewWithExporter without batching: every span is exported
// as it ends. For tests.
func NewSyncer(exp sdktrace.SpanExporter, cfg Config) *Provider {
	return newProvider(sdktrace.WithSyncer(exp), cfg)
}

func newProvider(proc sdktrace.TracerProviderOption, cfg Config) *Provider {
	cfg.EnsureDefaults()
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))
	return &Provider{sdk: sdktrace.NewTracerProvider(
		proc,
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*cfg.SampleRatio))),
	)}
}

// tracesURL is the OTLP/HTTP traces URL of a base endpoint, as the
// OTEL_EXPORTER_OTLP_ENDPOINT convention reads it.
func tracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// Tracer is the tracer the turn path uses; nil when p is nil (tracing
// off).
func (p *Provider) Tracer() *Tracer {
	if p == nil {
		return nil
	}
	return &Tracer{t: p.sdk.Tracer("github.com/turnpike-gateway/turnpike")}
}

// Start starts nothing: the OpenTelemetry SDK starts the batcher as New
// builds the provider, and spans come only once the components that make
// them start. It gives the provider the one life cycle of the stack's
// components; p may be nil.
func (p *Provider) Start(context.Context) error { return nil }

// Close flushes the spans not yet exported and stops the exporter, up to
// ctx; p may be nil.
func (p *Provider) Close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// propagator is W3C Trace Context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// off is the span of a nil Tracer: it records nothing and allocates
// nothing.
var off trace.Span = noop.Span{}

// Tracer starts turnpike's spans. A nil *Tracer is tracing off: Start
// returns ctx unchanged and a span that records nothing, Extract and
// Inject do nothing.
type Tracer struct {
	t trace.Tracer
}

// Start starts a span named name as a child of ctx's span; kind is
// trace.SpanKindClient for an engine request, SpanKindInternal
// otherwise. Without a recording span in ctx (a turn not sampled, work
// outside a turn) it starts none: a turn's steps are never roots.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if t == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, off
	}
	return t.t.Start(ctx, name, trace.WithSpanKind(kind))
}

// Extract returns ctx with the remote span context of the client's
// traceparent, if h has a valid one.
func (t *Tracer) Extract(ctx context.Context, h http.Header) context.Context {
	if t == nil || h.Get("Traceparent") == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject writes ctx's span context onto h as traceparent (and
// tracestate), replacing what was there; h must not be nil.
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// On reports whether tracing is on.
func (t *Tracer) On() bool { return t != nil }

// Fail marks span as failed by err; a nil err does nothing.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(attribute.String("error.type", errorType(err)))
}

// errorType is the error.type of err: its Go type, as the semantic
// conventions allow when there is no better low-cardinality name.
func errorType(err error) string {
	s := fmt.Sprintf("%T", err)
	return strings.TrimPrefix(s, "*")
}
