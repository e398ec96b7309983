package tracing

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func ratio(r float64) *float64 { return &r }

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{name: "defaults", cfg: Config{}},
		{name: "endpoint", cfg: Config{Endpoint: "http://collector:4318", SampleRatio: ratio(0.25)}},
		{name: "grpc", cfg: Config{Protocol: "grpc"}, want: []string{`protocol "grpc"`}},
		{name: "everything wrong", cfg: Config{Endpoint: "collector:4317", SampleRatio: ratio(1.5)},
			want: []string{"sampleRatio 1.5", `endpoint "collector:4317"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.EnsureDefaults()
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestTracesURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://c:4318":            "http://c:4318/v1/traces",
		"http://c:4318/":           "http://c:4318/v1/traces",
		"https://c/otlp/v1/traces": "https://c/otlp/v1/traces",
	} {
		if got := tracesURL(in); got != want {
			t.Errorf("tracesURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOffByDefault(t *testing.T) {
	t.Setenv(EnvEndpoint, "")
	t.Setenv(envTracesEndpoint, "")
	p, err := New(context.Background(), Config{}, nil, nil)
	if err != nil || p != nil {
		t.Fatalf("New without an endpoint = %v, %v; want tracing off", p, err)
	}
	if tr := p.Tracer(); tr.On() {
		t.Fatal("a nil provider's tracer is on")
	}
}

// TestExportsOTLP: spans reach a collector's /v1/traces as OTLP protobuf,
// with the endpoint from the config or, without one, from the environment.
func TestExportsOTLP(t *testing.T) {
	for _, fromEnv := range []bool{false, true} {
		name := "config"
		if fromEnv {
			name = "env"
		}
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
				mu.Unlock()
				if !strings.Contains(string(b), "chat m") || !strings.Contains(string(b), "svc-x") {
					t.Errorf("export body lacks the span or service name: %q", b)
				}
				w.Header().Set("Content-Type", "application/x-protobuf")
			}))
			defer collector.Close()
			cfg := Config{ServiceName: "svc-x"}
			t.Setenv(envTracesEndpoint, "")
			if fromEnv {
				t.Setenv(EnvEndpoint, collector.URL)
			} else {
				t.Setenv(EnvEndpoint, "")
				cfg.Endpoint = collector.URL
			}
			p, err := New(context.Background(), cfg, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			_, span := p.Tracer().StartTurn(context.Background(), OpChat, "m")
			span.End()
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0] != "POST /v1/traces application/x-protobuf" {
				t.Fatalf("collector got %q", got)
			}
		})
	}
}

// TestExportErrorsCounted: a collector refusing spans shows in
// turnpike_tracing_export_errors_total.
func TestExportErrorsCounted(t *testing.T) {
	t.Setenv(EnvEndpoint, "")
	t.Setenv(envTracesEndpoint, "")
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadRequest)
	}))
	defer collector.Close()
	reg := prometheus.NewRegistry()
	p, err := New(context.Background(), Config{Endpoint: collector.URL}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer().StartTurn(context.Background(), OpChat, "m")
	span.End()
	p.Close(context.Background())
	n, err := testutil.GatherAndCount(reg, "turnpike_tracing_export_errors_total")
	if err != nil || n != 1 {
		t.Fatalf("series %d, %v", n, err)
	}
	mfs, _ := reg.Gather()
	if v := mfs[0].GetMetric()[0].GetCounter().GetValue(); v < 1 {
		t.Fatalf("turnpike_tracing_export_errors_total = %v after a refused export", v)
	}
}

func TestChildrenNeedARecordingParent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p := NewSyncer(exp, Config{})
	defer p.Close(context.Background())
	tr := p.Tracer()
	_, orphan := tr.Start(context.Background(), SpanPick, trace.SpanKindInternal)
	if orphan.IsRecording() {
		t.Error("a step outside a turn started a root span")
	}
	ctx, turn := tr.StartTurn(context.Background(), OpChat, "m")
	_, child := tr.Start(ctx, SpanPick, trace.SpanKindInternal)
	child.End()
	turn.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Parent.SpanID() != spans[1].SpanContext.SpanID() {
		t.Fatalf("spans %v, want the pick under the turn", spans)
	}
}

func TestSampleRatioZeroKeepsSampledParents(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p := NewSyncer(exp, Config{SampleRatio: ratio(0)})
	defer p.Close(context.Background())
	tr := p.Tracer()
	_, s := tr.StartTurn(context.Background(), OpChat, "m")
	s.End()
	h := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	_, s = tr.StartTurn(tr.Extract(context.Background(), h), OpChat, "m")
	s.End()
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("spans %v, want only the client's sampled trace", spans)
	}
}

// TestOffAllocatesNothing: with tracing off the turn path's calls cost
// no allocation.
func TestOffAllocatesNothing(t *testing.T) {
	var tr *Tracer
	ctx := context.Background()
	h := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	n := testing.AllocsPerRun(100, func() {
		c := tr.Extract(ctx, h)
		c, turn := tr.StartTurn(c, OpChat, "m")
		_, s := tr.Start(c, SpanPick, trace.SpanKindInternal)
		tr.Inject(c, h)
		Fail(s, context.Canceled)
		s.End()
		turn.End()
	})
	if n != 0 {
		t.Fatalf("%v allocations per turn with tracing off", n)
	}
}

// FuzzExtract: any traceparent a client sends is read without panic, and
// one accepted as valid is sent on to engines as it came.
func FuzzExtract(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v")
	f.Add("ff-00000000000000000000000000000000-0000000000000000-00", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", ",,=")
	exp := tracetest.NewInMemoryExporter()
	p := NewSyncer(exp, Config{})
	defer p.Close(context.Background())
	tr := p.Tracer()
	f.Fuzz(func(t *testing.T, traceparent, tracestate string) {
		h := http.Header{"Traceparent": {traceparent}, "Tracestate": {tracestate}}
		ctx := tr.Extract(context.Background(), h)
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() {
			return
		}
		out := http.Header{}
		tr.Inject(ctx, out)
		if got := out.Get("Traceparent"); !strings.Contains(got, sc.TraceID().String()) || !strings.Contains(got, sc.SpanID().String()) {
			t.Fatalf("traceparent %q came back as %q", traceparent, got)
		}
	})
}
