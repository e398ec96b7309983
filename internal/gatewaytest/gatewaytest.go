package gatewaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
)

// TestModel is the model name the simulated engines serve.
const TestModel = "test-model"

// Recorder keeps the chat completion bodies an engine receives.
type Recorder struct {
	H  http.Handler
	Mu sync.Mutex
	// Bodies are the chat completion request bodies, in arrival order.
	Bodies []string
	// Active counts the chat completion requests being answered.
	Active atomic.Int64
	// Discard, once set, passes the bodies on unread
	// (a test that measures what the gateway allocates).
	Discard atomic.Bool
}

func (r *Recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/v1/chat/completions" && !r.Discard.Load() {
		b, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(b))
		r.Mu.Lock()
		r.Bodies = append(r.Bodies, string(b))
		r.Mu.Unlock()
		r.Active.Add(1)
		defer r.Active.Add(-1)
	}
	r.H.ServeHTTP(w, req)
}

// Count is how many chat completion bodies the engine received.
func (r *Recorder) Count() int {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	return len(r.Bodies)
}

// Last is the last chat completion body the engine received, "" before
// the first.
func (r *Recorder) Last() string {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if len(r.Bodies) == 0 {
		return ""
	}
	return r.Bodies[len(r.Bodies)-1]
}

// Sent is what the engine was sent, in order.
func (r *Recorder) Sent() []string {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	return append([]string(nil), r.Bodies...)
}

// Parts are what a stack's gateway is built of.
type Parts struct {
	Registry *pools.Registry
	Dispatch *dispatch.Dispatcher
	Service  *tpresponses.Service
	Logger   *slog.Logger
}

// Mount builds the gateway of a stack from its parts and returns its
// handler; it fails t if it cannot.
type Mount func(t testing.TB, p Parts) http.Handler

// Stack is a gateway with the Responses API over simulated engines (one
// unless NewFleet says more), and an OpenAI SDK client for it.
type Stack struct {
	Front  *httptest.Server
	Engine *Recorder
	// Engines are every engine, Engine the first.
	Engines []*Recorder
	Client  openai.Client
}

// NewStack is a stack over one simulated engine at timeScale.
func NewStack(t testing.TB, timeScale float64, mount Mount) *Stack {
	t.Helper()
	return NewStackWith(t, timeScale, tpresponses.Config{}, mount)
}

// NewStackWith is NewStack with the service's config.
func NewStackWith(t testing.TB, timeScale float64, cfg tpresponses.Config, mount Mount) *Stack {
	t.Helper()
	return NewFleet(t, sim.Config{TimeScale: timeScale}, cfg, 1, mount)
}

// NewStackSim is NewStack over a simulated engine of simCfg (its served
// model name is TestModel).
func NewStackSim(t testing.TB, simCfg sim.Config, cfg tpresponses.Config, mount Mount) *Stack {
	t.Helper()
	return NewFleet(t, simCfg, cfg, 1, mount)
}

// NewFleet is NewStackSim over n engines, picked round-robin.
func NewFleet(t testing.TB, simCfg sim.Config, cfg tpresponses.Config, n int, mount Mount) *Stack {
	t.Helper()
	simCfg.ServedModelName = TestModel
	var engines []http.Handler
	for range n {
		eng, err := sim.New(simCfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		engines = append(engines, eng.Handler())
	}
	return NewOn(t, cfg, mount, engines...)
}

// NewOn is a stack over the given engines.
func NewOn(t testing.TB, cfg tpresponses.Config, mount Mount, engines ...http.Handler) *Stack {
	t.Helper()
	return NewOnWith(t, cfg, dispatch.Options{}, mount, engines...)
}

// NewOnWith is NewOn with the dispatcher's options (its Registry, Policy
// and Logger are the stack's own).
func NewOnWith(t testing.TB, cfg tpresponses.Config, dopts dispatch.Options, mount Mount, engines ...http.Handler) *Stack {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	var recs []*Recorder
	var eps []pools.EndpointConfig
	for _, h := range engines {
		rec := &Recorder{H: h}
		backend := httptest.NewServer(rec)
		t.Cleanup(backend.Close)
		recs = append(recs, rec)
		eps = append(eps, pools.EndpointConfig{URL: backend.URL})
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{
		Name: "p", Model: "llama-3.1-8b", ServedModels: []string{TestModel}, Endpoints: eps,
	}}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	db, err := state.OpenPebble(t.TempDir(), state.PebbleOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	dopts.Registry, dopts.Policy, dopts.Logger = reg, &affinity.RoundRobin{}, log
	d, err := dispatch.New(dopts)
	if err != nil {
		t.Fatal(err)
	}
	cfg.CollectInterval, cfg.Logger = -1, log
	svc := tpresponses.New(tpresponses.NewStore(db.Namespace("rs/"), tpresponses.StoreOptions{}), d, cfg)
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(mount(t, Parts{Registry: reg, Dispatch: d, Service: svc, Logger: log}))
	t.Cleanup(func() {
		front.Close()
		svc.Close(context.Background())
		db.Close()
	})
	client := openai.NewClient(option.WithBaseURL(front.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	return &Stack{Front: front, Engine: recs[0], Engines: recs, Client: client}
}

// Text is a Responses input of one string.
func Text(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// ErrorBody is an OpenAI-shaped error body.
type ErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// ReadAPIError reads resp's body as an OpenAI-shaped error, failing t if
// it is not one.
func ReadAPIError(t *testing.T, resp *http.Response) ErrorBody {
	t.Helper()
	var eb ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
		t.Fatalf("error body is not OpenAI-shaped JSON: %v", err)
	}
	if eb.Error.Message == "" || eb.Error.Type == "" {
		t.Fatalf("error body lacks message or type: %+v", eb)
	}
	return eb
}
