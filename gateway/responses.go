package gateway

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
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/tracing"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// mountResponses registers the Responses and Conversations API on v1.
// Without a service the routes are not registered.
func (s *Server) mountResponses(v1 *echo.Group) {
	svc := s.opts.Responses
	if svc == nil {
		return
	}
	h := &responsesAPI{s: s, svc: svc}
	g := v1.Group("", h.observe)
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

// tenantOf is the request's tenant: the one the tenancy middleware set,
// else the default tenant of an open gateway.
func tenantOf(c echo.Context) string {
	if t := TenantOf(c); t != "" {
		return t
	}
	return DefaultTenant
}

// responsesAPIError maps the responses package's bare classes, which its
// store returns as they are; every other error of the package is an
// *apierror.Error already.
func responsesAPIError(err error) (*apierror.Error, bool) {
	switch {
	case errors.Is(err, responses.ErrNotFound):
		return apierror.NotFound("", "not_found", "Not found."), true
	case errors.Is(err, responses.ErrClosed):
		return apierror.Unavailable("unavailable", "The state store is closed; retry on another gateway."), true
	}
	return nil, false
}

// responsesAPI holds the Responses and Conversations handlers.
type responsesAPI struct {
	s   *Server
	svc *responses.Service
}

// observe counts the route's requests and their latency.
func (h *responsesAPI) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		status := c.Response().Status
		if err != nil && !c.Response().Committed {
			status = toAPIError(err).Status
		}
		h.s.metrics.observeRequest(c.Path(), status, start, 0)
		return err
	}
}

// sse writes Responses events as server-sent events, sending the status
// line with the first one and flushing every event, or, while held
// (responses.Holder), every burst of them.
type sse struct {
	c       echo.Context
	started bool
	buf     []byte
	// held: events are written and not yet flushed; unflushed: some are.
	held, unflushed bool
}

// Hold implements responses.Holder.
func (w *sse) Hold(hold bool) {
	w.held = hold
	if !hold && w.unflushed {
		w.unflushed = false
		w.c.Response().Flush()
	}
}

// Event implements responses.Sink.
func (w *sse) Event(typ string, data []byte) error {
	resp := w.c.Response()
	if !w.started {
		w.started = true
		resp.Header().Set(echo.HeaderContentType, "text/event-stream")
		resp.Header().Set("Cache-Control", "no-cache")
		resp.Header().Set("X-Accel-Buffering", "no")
		resp.WriteHeader(http.StatusOK)
	}
	w.buf = append(w.buf[:0], "event: "...)
	w.buf = append(w.buf, typ...)
	w.buf = append(w.buf, "\ndata: "...)
	w.buf = append(w.buf, data...)
	w.buf = append(w.buf, "\n\n"...)
	if _, err := resp.Write(w.buf); err != nil {
		return err
	}
	if w.held {
		w.unflushed = true
		return nil
	}
	resp.Flush()
	return nil
}

// finish ends a stream that may not have started: with no event sent, an
// error still gets its status and body.
func (w *sse) finish(err error) error {
	if err != nil && !w.started {
		return err
	}
	return nil
}

func (h *responsesAPI) create(c echo.Context) error {
	// A body read whole is the request's own (its raw JSON aliases it);
	// a staged one is decoded from its stage, which goes back to the pool
	// before the engine is asked: the request copies what it keeps.
	var req *wire.CreateRequest
	body, err := h.s.readChecked(c, prompt.ResponsesBody, "input", func(staged []byte) ([]byte, error) {
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
	}
	ctx, tenant := c.Request().Context(), tenantOf(c)
	h.s.nameModelRule(c, tenant, req.Model)
	if tr := h.s.opts.Tracer; tr.On() {
		var span trace.Span
		ctx, span = tr.StartTurn(tr.Extract(ctx, c.Request().Header), tracing.OpResponses, req.Model)
		defer span.End()
	}
	if !req.Stream {
		resp, err := h.svc.Create(ctx, tenant, req, c.Request().Header, nil)
		endResponseSpan(ctx, resp, err)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, resp)
	}
	w := &sse{c: c}
	resp, err := h.svc.Create(ctx, tenant, req, c.Request().Header, w)
	endResponseSpan(ctx, resp, err)
	if err == nil && req.Background {
		// The background response runs on without this client; follow it.
		err = h.svc.Stream(ctx, tenant, resp.ID, -1, w)
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

func (h *responsesAPI) compact(c echo.Context) error {
	body, err := readAllBody(c.Request())
	if err != nil {
		return err
	}
	req, err := wire.DecodeCompactRequest(body)
	if err != nil {
		return err
	}
	out, err := h.svc.Compact(c.Request().Context(), tenantOf(c), req, c.Request().Header)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (h *responsesAPI) inputTokens(c echo.Context) error {
	body, err := readAllBody(c.Request())
	if err != nil {
		return err
	}
	req, err := wire.DecodeInputTokensRequest(body)
	if err != nil {
		return err
	}
	out, err := h.svc.InputTokens(c.Request().Context(), tenantOf(c), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (h *responsesAPI) get(c echo.Context) error {
	q := c.QueryParams()
	stream, err := false, error(nil)
	if v := q.Get("stream"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return invalid("stream", "invalid_type", "Invalid type for 'stream': expected a boolean, but got '%s' instead.", v)
		}
		stream = b
	} else if stream, err = streamInBody(c); err != nil {
		return err
	}
	ctx, tenant, id := c.Request().Context(), tenantOf(c), c.Param("id")
	if !stream {
		resp, err := h.svc.Get(ctx, tenant, id)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, resp)
	}
	after := -1
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			return invalid("starting_after", "invalid_type", "Invalid 'starting_after': expected a sequence number, but got '%s' instead.", v)
		}
		after = n
	}
	w := &sse{c: c}
	return w.finish(h.svc.Stream(ctx, tenant, id, after, w))
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
		return false, invalid("stream", "invalid_type", "Invalid type for 'stream': expected a boolean.")
	}
	return body.Stream != nil && *body.Stream, nil
}

func (h *responsesAPI) delete(c echo.Context) error {
	d, err := h.svc.Delete(c.Request().Context(), tenantOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (h *responsesAPI) cancel(c echo.Context) error {
	resp, err := h.svc.Cancel(c.Request().Context(), tenantOf(c), c.Param("id"))
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
			return o, invalid("limit", "invalid_type", "Invalid type for 'limit': expected an integer, but got '%s' instead.", v)
		}
		// Checked here rather than left to the service: an explicit 0 is
		// out of range, but ListOptions reads a zero Limit as the default.
		if n < 1 || n > 100 {
			return o, invalid("limit", "invalid_value", "Invalid 'limit': expected a value between 1 and 100, but got %d instead.", n)
		}
		o.Limit = n
	}
	return o, nil
}

func (h *responsesAPI) inputItems(c echo.Context) error {
	o, err := listOptions(c)
	if err != nil {
		return err
	}
	l, err := h.svc.InputItems(c.Request().Context(), tenantOf(c), c.Param("id"), o)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
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

func (h *responsesAPI) createConversation(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	conv, err := h.svc.CreateConversation(c.Request().Context(), tenantOf(c), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, conv)
}

func (h *responsesAPI) getConversation(c echo.Context) error {
	conv, err := h.svc.GetConversation(c.Request().Context(), tenantOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, conv)
}

func (h *responsesAPI) updateConversation(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	conv, err := h.svc.UpdateConversation(c.Request().Context(), tenantOf(c), c.Param("id"), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, conv)
}

func (h *responsesAPI) deleteConversation(c echo.Context) error {
	d, err := h.svc.DeleteConversation(c.Request().Context(), tenantOf(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, d)
}

func (h *responsesAPI) listItems(c echo.Context) error {
	o, err := listOptions(c)
	if err != nil {
		return err
	}
	l, err := h.svc.ConversationItems(c.Request().Context(), tenantOf(c), c.Param("id"), o)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

func (h *responsesAPI) addItems(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	l, err := h.svc.AddConversationItems(c.Request().Context(), tenantOf(c), c.Param("id"), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, l)
}

func (h *responsesAPI) getItem(c echo.Context) error {
	it, err := h.svc.ConversationItem(c.Request().Context(), tenantOf(c), c.Param("id"), c.Param("item_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, it)
}

func (h *responsesAPI) deleteItem(c echo.Context) error {
	conv, err := h.svc.DeleteConversationItem(c.Request().Context(), tenantOf(c), c.Param("id"), c.Param("item_id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, conv)
}
