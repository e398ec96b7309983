package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/turnpike-gateway/turnpike/auth"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/tracing"
)

// Defaults for Options.
const (
	DefaultBodyLimit       = 32 << 20 // bytes
	DefaultShutdownTimeout = 30 * time.Second
)

// Options configure a Server. Registry and Dispatch are required.
type Options struct {
	// Addr is the TCP address Start listens on, e.g. 127.0.0.1:8080; port
	// 0 takes a free port, which Addr reports. Required by Start; Handler
	// serves without it.
	Addr string
	// Registry is the fleet. Required.
	Registry *pools.Registry
	// Dispatch runs every turn: sessions, flow control, routing, the
	// engine request. Required.
	Dispatch *dispatch.Dispatcher
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Metrics is where the gateway registers its collectors and what
	// /metrics serves; nil means a new registry of its own.
	Metrics *prometheus.Registry
	// BodyLimit bounds a request body, in bytes. Default 32 MiB.
	BodyLimit int64
	// BodyBudget bounds the bytes of request bodies held at once by the
	// requests being handled: a body's stated length from before it is
	// read until its request ends (what is read of it when it states
	// none). A request past it is refused with a 503 and Retry-After
	// before its body is read. (A background response keeps its body
	// past its request: the budget counts it until the request returns.)
	// Default DefaultBodyBudget (BodyBudgetFor gives the default under a
	// Go memory limit); never less than BodyLimit.
	BodyBudget int64
	// MaxTokenBytes is the most bytes of text one token of a served
	// model's tokenizer holds: a chat, completion or Responses body whose
	// text is longer than its model's context window times this is
	// refused (400 context_length_exceeded) before it is decoded. Default
	// DefaultMaxTokenBytes; negative refuses none.
	MaxTokenBytes int
	// ShutdownTimeout bounds how long Close waits for in-flight
	// requests, streams included. Default 30s.
	ShutdownTimeout time.Duration
	// WebSocketLimit bounds a Responses WebSocket connection's life.
	// Default 60m.
	WebSocketLimit time.Duration
	// OpenAPI is the spec served at /openapi.yaml; nil serves 404.
	OpenAPI []byte
	// Responses serves the Responses and Conversations API, whose routes
	// package responses/api registers; its owner starts and closes it.
	// nil leaves those routes unregistered.
	Responses *responses.Service
	// Auth authenticates tenants and the admin API; nil leaves /v1 open
	// (every request is the default tenant's) and mounts no admin API.
	Auth *auth.Authenticator
	// Admin serves /admin/v1 behind Auth's admin token; nil mounts none.
	Admin AdminAPI
	// Batches serves the Files and Batch API (*batch.Service); its owner
	// starts and closes it. nil leaves those routes unregistered.
	Batches TenantAPI
	// PromptMemoBytes bounds the memory of the chat bodies remembered so
	// that a conversation's next turn is read, encoded and hashed only
	// past what it shares with the last (prompt.Memo). Default 64 MiB;
	// negative remembers none.
	PromptMemoBytes int64
	// Tracer starts a span per chat, completion and Responses turn,
	// child of the client's traceparent when it sent one; nil traces
	// nothing. Pass the same tracer to dispatch and responses.
	Tracer *tracing.Tracer
	// StoreHealth says whether the state store answers (state.DB.Health,
	// an atomic load): /readyz answers 503 while it returns an error, so
	// that a load balancer sends turns that must be stored elsewhere. nil
	// leaves the store out of readiness.
	StoreHealth func() error
	// Idempotency keeps, per tenant and Idempotency-Key, the answers of
	// non-streamed Responses and chat requests, so that a retry is
	// answered once (idempotency.go): the state store's, shared by every
	// gateway on it. nil ignores the header.
	Idempotency *state.Records
	// IdempotencyTTL is how long an answer is kept under its key.
	// Default DefaultIdempotencyTTL (1h).
	IdempotencyTTL time.Duration
	// FlushInterval spaces a relayed stream's writes to its client: after
	// the first token, at most one write an interval, carrying what the
	// engine sent meanwhile (dispatch.Turn.Linger). 0: each event at once.
	FlushInterval time.Duration
}

// DefaultPromptMemoBytes is the default of Options.PromptMemoBytes: about
// 300 agent sessions of 40k tokens.
const DefaultPromptMemoBytes = 64 << 20

// AdminAPI is what the gateway needs of the admin REST API
// (*admin.Service): to mount its routes on the group at /admin/v1, whose
// middleware has checked the admin token. The gateway calls down into it;
// admin needs nothing of the gateway.
type AdminAPI interface {
	Register(g *echo.Group)
}

// TenantAPI is an API the gateway mounts on /v1 behind its tenancy
// middleware (*batch.Service): it registers its routes on g and names each
// request's tenant with tenant. The gateway calls down into it.
type TenantAPI interface {
	Register(g *echo.Group, tenant func(echo.Context) string)
}

// Server is turnpike's HTTP front: the OpenAI-compatible API, health and
// metrics. Create with New; serve with Start and Close, or use Handler.
type Server struct {
	opts     Options
	log      *slog.Logger
	echo     *echo.Echo
	reg      *pools.Registry
	dispatch *dispatch.Dispatcher
	metrics  *metrics
	// idem counts the outcomes of requests with an Idempotency-Key.
	idem *idempotencyMetrics
	// memo remembers recent chat bodies; nil when disabled.
	memo *prompt.Memo
	// bodies is the budget of the request bodies in flight; overContext
	// counts the bodies refused as longer than their model's context, and
	// contextFloor is, by body kind, the length under which none can be.
	bodies       bodyBudget
	overContext  atomic.Int64
	contextFloor [bodyKinds]int64
	// stages keep the bodies being checked outside the heap (stage.go).
	stages stagePool

	// started is when the server was built; /v1/models reports it as the
	// models' creation time, the one the gateway knows.
	started time.Time

	// active counts the requests being handled, so that a shutdown past
	// its deadline can wait for them to say why they end.
	active sync.WaitGroup
	// draining: Drain was called, /readyz answers 503.
	draining atomic.Bool

	// served delivers, once, why the server stopped serving (Served).
	served chan error

	mu struct {
		sync.Mutex
		// protects the fields below: Start sets them, Close reads them
		http *http.Server
		// addr is the address listened on.
		addr string
		// endRequests cancels every request's context, with a cause.
		endRequests context.CancelCauseFunc
	}
}

// ErrShuttingDown is the cause of the requests still running when a
// shutdown's deadline passes: streams end with an error event (chat) or
// response.failed (Responses) that says so.
var ErrShuttingDown = errors.New("gateway: shutting down")

// shutdownGrace is how long requests ended at the shutdown deadline get
// to write their last event before connections close.
const shutdownGrace = 2 * time.Second

// New builds a Server and registers its routes.
func New(opts Options) (*Server, error) {
	if opts.Registry == nil || opts.Dispatch == nil {
		return nil, errors.New("gateway: Registry and Dispatch are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	if opts.WebSocketLimit <= 0 {
		opts.WebSocketLimit = DefaultWebSocketLimit
	}
	if opts.BodyLimit <= 0 {
		opts.BodyLimit = DefaultBodyLimit
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.BodyBudget <= 0 {
		opts.BodyBudget = DefaultBodyBudget
	}
	// A budget smaller than one body would refuse the largest forever.
	opts.BodyBudget = max(opts.BodyBudget, opts.BodyLimit)
	if opts.MaxTokenBytes == 0 {
		opts.MaxTokenBytes = DefaultMaxTokenBytes
	}
	if opts.IdempotencyTTL <= 0 {
		opts.IdempotencyTTL = DefaultIdempotencyTTL
	}
	s := &Server{
		opts:     opts,
		log:      opts.Logger,
		reg:      opts.Registry,
		dispatch: opts.Dispatch,
		started:  time.Now(),
		served:   make(chan error, 1),
	}
	if opts.PromptMemoBytes == 0 {
		opts.PromptMemoBytes = DefaultPromptMemoBytes
	}
	if opts.PromptMemoBytes > 0 {
		s.memo = prompt.NewMemo(opts.PromptMemoBytes)
	}
	s.metrics = newMetrics(opts.Metrics, opts.Registry, s.memo)
	s.idem = newIdempotencyMetrics(opts.Metrics)
	s.bodies.limit = opts.BodyBudget
	s.stages.max = stagesKept
	s.contextFloor = s.contextFloors()
	opts.Metrics.MustRegister(bodyCollector{s})

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.track)
	e.Use(s.closeWhileDraining)
	e.Use(middleware.Recover())
	e.Use(middleware.RequestID())
	e.Use(requestIDToEngines)
	e.Use(s.limitBodies)
	s.echo = e

	// Group middleware must be given when the group is made: Echo attaches
	// it to each route as the route is added.
	var v1 *echo.Group
	if opts.Auth != nil {
		v1 = e.Group("/v1", requireTenant(opts.Auth), s.idempotent)
	} else {
		v1 = e.Group("/v1", s.idempotent)
	}
	v1.POST("/chat/completions", s.handleChatCompletions)
	v1.POST("/completions", s.handleCompletions)
	v1.GET("/models", s.handleModels)
	if err := s.mountResponses(v1); err != nil {
		return nil, err
	}
	if opts.Batches != nil {
		opts.Batches.Register(v1, tenantOf)
	}

	if opts.Auth != nil && opts.Admin != nil {
		opts.Admin.Register(e.Group("/admin/v1", requireAdmin(opts.Auth)))
	}

	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(opts.Metrics, promhttp.HandlerOpts{})))
	e.GET("/openapi.yaml", s.handleOpenAPI)
	return s, nil
}

// Handler is the server's http.Handler, for tests and embedding.
func (s *Server) Handler() http.Handler { return s.echo }

// Start listens on Options.Addr and serves there, from a goroutine of its
// own, until Close, whatever becomes of ctx. It is called once.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.Addr == "" {
		return errors.New("gateway: no address to listen on (Options.Addr)")
	}
	base, end := context.WithCancelCause(context.WithoutCancel(ctx))
	srv := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.http != nil {
		end(nil)
		return errors.New("gateway: already serving")
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		end(nil)
		return fmt.Errorf("gateway: %w", err)
	}
	s.mu.http, s.mu.addr, s.mu.endRequests = srv, ln.Addr().String(), end
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.served <- err
	}()
	return nil
}

// Addr is the address the server listens on, once started.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.addr
}

// Served delivers, once, why the server stopped serving: nil after Close,
// or the listener's error if it failed before.
func (s *Server) Served() <-chan error { return s.served }

// Drain makes /readyz answer 503 from now on while every other route
// serves as before: the first step of a graceful shutdown, so that load
// balancers stop sending requests before Close stops accepting them.
// Every answer from now on also carries Connection: close, and its
// connection closes once it is written: a client holding a keep-alive
// connection learns on its next answer to open a new one, which a load
// balancer sends to another gateway. (Idle connections are not closed
// here: a client may be sending on one at this instant, and a request
// lost that way is one the client must retry. Close closes those that
// are still idle.)
func (s *Server) Drain() { s.draining.Store(true) }

// closeWhileDraining answers with Connection: close once Drain was called;
// net/http then closes the connection after the answer.
func (s *Server) closeWhileDraining(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.draining.Load() {
			c.Response().Header().Set(echo.HeaderConnection, "close")
		}
		return next(c)
	}
}

// Close stops accepting connections and waits, up to the shutdown
// timeout or ctx, for in-flight requests (streams included) to finish.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	srv, end := s.mu.http, s.mu.endRequests
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(ctx)
	if err != nil {
		s.log.Warn("shutdown deadline passed; ending the requests still in flight", "err", err)
	}
	// What still runs — requests past the deadline, and WebSocket
	// connections, which Shutdown does not wait for — is ended with a
	// reason, so each stream tells its client why; then what is left is
	// closed.
	end(ErrShuttingDown)
	done := make(chan struct{})
	go func() { s.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
	}
	srv.Close()
	return err
}

// track counts the request in active while it is handled.
func (s *Server) track(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		s.active.Add(1)
		defer s.active.Done()
		return next(c)
	}
}

// requestIDToEngines puts the request's id (the client's, or the one the
// RequestID middleware made) on the request itself, where the turn path
// reads the headers it passes on to engines: engine logs then name the
// same request as the gateway's.
func requestIDToEngines(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Request().Header
		if h.Get(echo.HeaderXRequestID) == "" {
			h.Set(echo.HeaderXRequestID, c.Response().Header().Get(echo.HeaderXRequestID))
		}
		return next(c)
	}
}

// Routes lists the method and path of every registered route, for the
// OpenAPI consistency test and the admin view.
func (s *Server) Routes() []*echo.Route { return s.echo.Routes() }

func (s *Server) handleHealthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz answers 200 when the state store answers and at least one
// endpoint can take requests. The store's failure is not told: /readyz
// is open, and it names the store's address.
func (s *Server) handleReadyz(c echo.Context) error {
	if s.draining.Load() {
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
	}
	if h := s.opts.StoreHealth; h != nil && h() != nil {
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "state store unavailable"})
	}
	for _, ep := range s.reg.Endpoints() {
		if ep.Available() {
			return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
		}
	}
	return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "no endpoint available"})
}

func (s *Server) handleOpenAPI(c echo.Context) error {
	if s.opts.OpenAPI == nil {
		return echo.ErrNotFound
	}
	return c.Blob(http.StatusOK, "application/yaml", s.opts.OpenAPI)
}

// handleModels lists the union of the pools' served models, then the
// names the model rewrites take that no pool serves (aliases), each with
// the served model that answers it as its root, as vLLM names the model
// behind a served name: of them, those the request's tenant may use.
func (s *Server) handleModels(c echo.Context) error {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		Root    string `json:"root,omitempty"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	tenant := tenantOf(c)
	served := s.reg.Models()
	for _, m := range served {
		if s.dispatch.MayUse(tenant, m) {
			out.Data = append(out.Data, model{ID: m, Object: "model", Created: s.started.Unix(), OwnedBy: "turnpike"})
		}
	}
	for _, a := range s.dispatch.Models().Aliases() {
		if !slices.Contains(served, a.Name) && s.dispatch.MayUse(tenant, a.Name) {
			out.Data = append(out.Data, model{ID: a.Name, Object: "model", Created: s.started.Unix(), OwnedBy: "turnpike", Root: a.Target})
		}
	}
	return c.JSON(http.StatusOK, out)
}
