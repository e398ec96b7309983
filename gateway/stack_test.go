package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
)

// The gateway's tests of its own concerns (bodies, flushing, tracing,
// sessions, models) with the Responses API mounted use gatewaytest's
// stack, with the gateway itself at hand.

type recorder = gatewaytest.Recorder

var (
	text         = gatewaytest.Text
	readAPIError = gatewaytest.ReadAPIError
)

// responsesStack is gatewaytest's stack and its gateway.
type responsesStack struct {
	front  *httptest.Server
	engine *recorder
	// engines are every engine, engine the first.
	engines []*recorder
	client  openai.Client
	server  *Server
}

// mount builds the stack's gateway; stackOf keeps it.
func (st *responsesStack) mount(t testing.TB, p gatewaytest.Parts) http.Handler {
	t.Helper()
	s, err := New(Options{Registry: p.Registry, Dispatch: p.Dispatch, Logger: p.Logger, BodyLimit: 1 << 20, Responses: p.Service})
	if err != nil {
		t.Fatal(err)
	}
	st.server = s
	return s.Handler()
}

// stackOf builds a stack with build, given the mount that keeps the
// gateway.
func stackOf(build func(gatewaytest.Mount) *gatewaytest.Stack) *responsesStack {
	st := &responsesStack{}
	g := build(st.mount)
	st.front, st.engine, st.engines, st.client = g.Front, g.Engine, g.Engines, g.Client
	return st
}

func newResponsesStack(t testing.TB, timeScale float64) *responsesStack {
	t.Helper()
	return stackOf(func(m gatewaytest.Mount) *gatewaytest.Stack { return gatewaytest.NewStack(t, timeScale, m) })
}

// newResponsesOn is a responses stack over the given engines.
func newResponsesOn(t testing.TB, cfg tpresponses.Config, engines ...http.Handler) *responsesStack {
	t.Helper()
	return stackOf(func(m gatewaytest.Mount) *gatewaytest.Stack { return gatewaytest.NewOn(t, cfg, m, engines...) })
}

// newSimStackWith is a responses stack over one simulated engine serving
// testModel, with the dispatcher's options.
func newSimStackWith(t testing.TB, dopts dispatch.Options) *responsesStack {
	t.Helper()
	eng, err := sim.New(sim.Config{ServedModelName: testModel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return newResponsesOnWith(t, tpresponses.Config{}, dopts, eng.Handler())
}

// newResponsesOnWith is newResponsesOn with the dispatcher's options
// (its Registry, Policy and Logger are the stack's own).
func newResponsesOnWith(t testing.TB, cfg tpresponses.Config, dopts dispatch.Options, engines ...http.Handler) *responsesStack {
	t.Helper()
	return stackOf(func(m gatewaytest.Mount) *gatewaytest.Stack {
		return gatewaytest.NewOnWith(t, cfg, dopts, m, engines...)
	})
}
