package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/budgets"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/tracing"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Defaults for Options.
const (
	// DefaultMessageLimit bounds one WebSocket message, in bytes, as the
	// gateway's default body limit bounds a request body.
	DefaultMessageLimit = 32 << 20
	// DefaultWebSocketLimit is how long a Responses WebSocket connection
	// may live, as OpenAI allows.
	DefaultWebSocketLimit = 60 * time.Minute
)

// Options configure an API. Service is required.
type Options struct {
	// Service answers every route; its owner starts and closes it.
	// Required.
	Service *responses.Service
	// Tracer starts a span per Responses turn, child of the client's
	// traceparent when it sent one; nil traces nothing.
	Tracer *tracing.Tracer
	// MessageLimit bounds one WebSocket message, in bytes. Default
	// DefaultMessageLimit.
	MessageLimit int64
	// WebSocketLimit bounds a WebSocket connection's life. Default
	// DefaultWebSocketLimit.
	WebSocketLimit time.Duration
	// Metrics is where the WebSocket collectors are registered; nil
	// registers none.
	Metrics prometheus.Registerer
}

// Front is what the API asks of the HTTP server that mounts it. The
// server calls down into the API (Register); the API reaches the server's
// facilities only through these functions, and imports nothing of it.
type Front struct {
	// Tenant names a request's tenant. Required.
	Tenant func(echo.Context) string
	// ReadChecked reads a body of kind with read, which is given the
	// staged bytes to copy, or nil to read the request's body itself, and
	// refuses it before it is decoded when its text alone is longer than
	// its model's context window. Required.
	ReadChecked func(c echo.Context, kind prompt.BodyKind, param string, read func(staged []byte) ([]byte, error)) ([]byte, error)
	// NameModelRule names, in the response's header, the rule that
	// rewrites the request's model; nil names none.
	NameModelRule func(c echo.Context, tenant, model string)
	// Observe counts a request of route with its status and latency; nil
	// counts none.
	Observe func(route string, status int, start time.Time)
	// Error maps an error of any class onto the OpenAI error shape, as
	// the server's error handler does. Required.
	Error func(error) *apierror.Error
	// ShuttingDown is the cause with which the server ends the requests
	// still running at its shutdown deadline: a WebSocket connection's
	// turn ends with it, and the connection closes. nil: none.
	ShuttingDown error
}

// API serves the Responses and Conversations API over a
// *responses.Service. Create with New; mount with Register.
type API struct {
	opts Options
	f    Front
	m    *wsMetrics
}

// New builds an API and registers its collectors.
func New(opts Options) (*API, error) {
	if opts.Service == nil {
		return nil, errors.New("api: Service is required")
	}
	if opts.MessageLimit <= 0 {
		opts.MessageLimit = DefaultMessageLimit
	}
	if opts.WebSocketLimit <= 0 {
		opts.WebSocketLimit = DefaultWebSocketLimit
	}
	return &API{opts: opts, m: newWSMetrics(opts.Metrics)}, nil
}

// Register mounts the Responses and Conversations routes on g, the
// server's /v1 group, whose middleware has named the tenant. It is called
// once, before the server serves.
func (h *API) Register(g *echo.Group, f Front) {
	h.f = f
	g = g.Group("", h.observe)
	g.POST("/responses", h.create)
	g.POST("/responses/compact", h.compact)
	g.POST("/responses/input_tokens", h.inputTokens)
	g.GET("/responses", h.websocket)
	g.GET("/responses/:id", h.get)
	g.DELETE("/responses/:id", h.delete)
	g.POST("/responses/:id/cancel", h.cancel)
	g.GET("/responses/:id/input_items", h.inputItems)
	g.POST("/conversations", h.createConversation)
	g.GET("/conversations/:id", h.getConversation)
	g.POST("/conversations/:id", h.updateConversation)
	g.DELETE("/conversations/:id", h.deleteConversation)
	g.GET("/conversations/:id/items", h.listItems)
	g.POST("/conversations/:id/items", h.addItems)
	g.GET("/conversations/:id/items/:item_id", h.getItem)
	g.DELETE("/conversations/:id/items/:item_id", h.deleteItem)
}

// observe counts the route's requests and their latency.
func (h *API) observe(next echo.HandlerFunc) echo.HandlerFunc {
	if h.f.Observe == nil {
		return next
	}
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil && !c.Response().Committed {
			status = h.f.Error(err).Status
		}
		h.f.Observe(c.Path(), status, start)
		return err
	}
}

// sse writes Responses events as server-sent events, sending the status
// line with the first one and flushing every event, or, while held
// (responses.Holder), every burst of them in one write.
type sse struct {
	c echo.Context
	// note holds the budgets' state, written in the headers.
	note    *budgets.Note
	started bool
	// buf holds the events not yet written: one, or while held, every
	// one since the hold began.
	buf  []byte
	held bool
}

// Hold implements responses.Holder.
func (w *sse) Hold(hold bool) {
	w.held = hold
	if !hold && len(w.buf) > 0 {
		w.write()
	}
}

// write writes the events in buf and flushes them, in one write to the
// connection (a write longer than the server's buffers goes past them).
func (w *sse) write() error {
	resp := w.c.Response()
	_, err := resp.Write(w.buf)
	w.buf = w.buf[:0]
	if err != nil {
		return err
	}
	resp.Flush()
	return nil
}

// Event implements responses.Sink.
func (w *sse) Event(typ string, data []byte) error {
	if !w.started {
		w.started = true
		resp := w.c.Response()
		resp.Header().Set(echo.HeaderContentType, "text/event-stream")
		resp.Header().Set("Cache-Control", "no-cache")
		resp.Header().Set("X-Accel-Buffering", "no")
		w.note.Set(resp.Header())
		resp.WriteHeader(http.StatusOK)
	}
	w.buf = append(w.buf, "event: "...)
	w.buf = append(w.buf, typ...)
	w.buf = append(w.buf, "\ndata: "...)
	w.buf = append(w.buf, data...)
	w.buf = append(w.buf, "\n\n"...)
	if w.held {
		return nil
	}
	return w.write()
}

// finish ends a stream that may not have started: with no event sent, an
// error still gets its status and body.
func (w *sse) finish(err error) error {
	if err != nil && !w.started {
		return err
	}
	return nil
}

func (h *API) create(c echo.Context) error {
	// A body read whole is the request's own (its raw JSON aliases it);
	// a staged one is decoded from its stage, which goes back to the pool
	// before the engine is asked: the request copies what it keeps.
	var req *wire.CreateRequest
	body, err := h.f.ReadChecked(c, prompt.ResponsesBody, "input", func(staged []byte) ([]byte, error) {
		if staged == nil {
			return readAllBody(c.Request())
		}
		var err error
		req, err = wire.DecodeCreateRequestCopy(staged)
		return nil, err
	})
	if err != nil {
		return err
	}
	if req == nil {
		if req, err = wire.DecodeCreateRequest(body); err != nil {
			return err
		}
		if !req.Background {
			// Only a background response is run from its body again:
			// this one need not hold it while it runs.
			req.Body = nil
		}
	}
	ctx, tenant := c.Request().Context(), h.f.Tenant(c)
	if h.f.NameModelRule != nil {
		h.f.NameModelRule(c, tenant, req.Model)
	}
	if tr := h.opts.Tracer; tr.On() {
		var span trace.Span
		ctx, span = tr.StartTurn(tr.Extract(ctx, c.Request().Header), tracing.OpResponses, req.Model)
		defer span.End()
	}
	// The turns the response runs note their tenant's budgets for the
	// x-ratelimit-* headers.
	ctx, note := budgets.WithNote(ctx)
	if !req.Stream {
		resp, err := h.opts.Service.Create(ctx, tenant, req, c.Request().Header, nil)
		endResponseSpan(ctx, resp, err)
		if err != nil {
			return err
		}
		note.Set(c.Response().Header())
		return c.JSON(http.StatusOK, resp)
	}
	w := &sse{c: c, note: note}
	resp, err := h.opts.Service.Create(ctx, tenant, req, c.Request().Header, w)
	endResponseSpan(ctx, resp, err)
	if err == nil && req.Background {
		// The background response runs on without this client; follow it.
		err = h.opts.Service.Stream(ctx, tenant, resp.ID, -1, w)
	}
	return w.finish(err)
}

// endResponseSpan notes the response's id, and its failure, on the turn's
// span in ctx.
func endResponseSpan(ctx context.Context, resp *wire.Response, err error) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if resp != nil {
		span.SetAttributes(tracing.ResponseID.String(resp.ID))
		if resp.Error != nil {
			span.SetStatus(codes.Error, resp.Error.Message)
		}
	}
	tracing.Fail(span, err)
}

func (h *API) compact(c echo.Context) error {
	body, err := readAllBody(c.Request())
	if err != nil {
		return err
	}
	req, err := wire.DecodeCompactRequest(body)
	if err != nil {
		return err
	}
	out, err := h.opts.Service.Compact(c.Request().Context(), h.f.Tenant(c), req, c.Request().Header)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (h *API) inputTokens(c echo.Context) error {
	body, err := readAllBody(c.Request())
	if err != nil {
		return err
	}
	req, err := wire.DecodeInputTokensRequest(body)
	if err != nil {
		return err
	}
	out, err := h.opts.Service.InputTokens(c.Request().Context(), h.f.Tenant(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (h *API) get(c echo.Context) error {
	q := c.QueryParams()
	stream, err := false, error(nil)
	if v := q.Get("stream"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return apierror.Invalid("stream", "invalid_type", "Invalid type for 'stream': expected a boolean, but got '%s' instead.", v)
		}
		stream = b
	} else if stream, err = streamInBody(c); err != nil {
		return err
	}
	ctx, tenant, id := c.Request().Context(), h.f.Tenant(c), c.Param("id")
	if !stream {
		resp, err := h.opts.Service.Get(ctx, tenant, id)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, resp)
	}
	after := -1
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			return apierror.Invalid("starting_after", "invalid_type", "Invalid 'starting_after': expected a sequence number, but got '%s' instead.", v)
		}
		after = n
	}
	w := &sse{c: c}
	return w.finish(h.opts.Service.Stream(ctx, tenant, id, after, w))
}

// streamInBody reads {"stream": true} from a GET's body, where the
// OpenAI SDKs put it when they retrieve a response as a stream.
func streamInBody(c echo.Context) (bool, error) {
	b, err := readAllBody(c.Request())
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return false, err
	}
	var body struct {
		Stream *bool `json:"stream"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return false, apierror.Invalid("stream", "invalid_type", "Invalid type for 'stream': expected a boolean.")
	}
	return body.Stream != nil && *body.Stream, nil
}

func (h *API) delete(c echo.Context) error {
	d, err := h.opts.Service.Delete(c.Request().Context(), h.f.Tenant(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (h *API) cancel(c echo.Context) error {
	resp, err := h.opts.Service.Cancel(c.Request().Context(), h.f.Tenant(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// listOptions reads after, limit and order from the query.
func listOptions(c echo.Context) (responses.ListOptions, error) {
	q := c.QueryParams()
	o := responses.ListOptions{After: q.Get("after"), Order: q.Get("order")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return o, apierror.Invalid("limit", "invalid_type", "Invalid type for 'limit': expected an integer, but got '%s' instead.", v)
		}
		// Checked here rather than left to the service: an explicit 0 is
		// out of range, but ListOptions reads a zero Limit as the default.
		if n < 1 || n > 100 {
			return o, apierror.Invalid("limit", "invalid_value", "Invalid 'limit': expected a value between 1 and 100, but got %d instead.", n)
		}
		o.Limit = n
	}
	return o, nil
}

func (h *API) inputItems(c echo.Context) error {
	o, err := listOptions(c)
	if err != nil {
		return err
	}
	l, err := h.opts.Service.InputItems(c.Request().Context(), h.f.Tenant(c), c.Param("id"), o)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

// bodyRoom is the room to read r's body into at once: the length it
// states (the server's body limit has bounded it), with bytes.MinRead
// spare for ReadFrom's last read, which finds the end; 0 when it states
// none.
func bodyRoom(r *http.Request) int {
	if n := r.ContentLength; n > 0 && n <= 64<<20 {
		return int(n) + bytes.MinRead
	}
	return 0
}

// readAllBody reads a request's body whole, into one buffer of bodyRoom
// when the body states its length.
func readAllBody(r *http.Request) ([]byte, error) {
	n := bodyRoom(r)
	if n == 0 {
		return io.ReadAll(r.Body)
	}
	buf := bytes.NewBuffer(make([]byte, 0, n))
	_, err := buf.ReadFrom(r.Body)
	return buf.Bytes(), err
}

func readBody(c echo.Context) ([]byte, error) {
	b, err := readAllBody(c.Request())
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	return b, nil
}

func (h *API) createConversation(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	conv, err := h.opts.Service.CreateConversation(c.Request().Context(), h.f.Tenant(c), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, conv)
}

func (h *API) getConversation(c echo.Context) error {
	conv, err := h.opts.Service.GetConversation(c.Request().Context(), h.f.Tenant(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, conv)
}

func (h *API) updateConversation(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	conv, err := h.opts.Service.UpdateConversation(c.Request().Context(), h.f.Tenant(c), c.Param("id"), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, conv)
}

func (h *API) deleteConversation(c echo.Context) error {
	d, err := h.opts.Service.DeleteConversation(c.Request().Context(), h.f.Tenant(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (h *API) listItems(c echo.Context) error {
	o, err := listOptions(c)
	if err != nil {
		return err
	}
	l, err := h.opts.Service.ConversationItems(c.Request().Context(), h.f.Tenant(c), c.Param("id"), o)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

func (h *API) addItems(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	l, err := h.opts.Service.AddConversationItems(c.Request().Context(), h.f.Tenant(c), c.Param("id"), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

func (h *API) getItem(c echo.Context) error {
	it, err := h.opts.Service.ConversationItem(c.Request().Context(), h.f.Tenant(c), c.Param("id"), c.Param("item_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, it)
}

func (h *API) deleteItem(c echo.Context) error {
	conv, err := h.opts.Service.DeleteConversationItem(c.Request().Context(), h.f.Tenant(c), c.Param("id"), c.Param("item_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, conv)
}
