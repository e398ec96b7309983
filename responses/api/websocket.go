package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/tracing"
	"go.opentelemetry.io/otel/trace"
)

// errConnectionLimit ends a connection that reached its time limit; a
// turn in flight then fails with it.
var errConnectionLimit = errors.New("responses websocket connection limit reached")

// wsWriteTimeout bounds one event's write: a client that stops reading
// for that long loses its connection rather than holding a turn.
const wsWriteTimeout = 30 * time.Second

// wsEvent is an error event sent on a Responses WebSocket connection.
type wsEvent struct {
	Type   string          `json:"type"`
	Status int             `json:"status"`
	Error  *apierror.Error `json:"error"`
}

// wsConn is one Responses WebSocket connection: its turns run one after
// another, and it keeps its last response's context so that the next
// turn can continue it by previous_response_id whether or not it was
// stored.
type wsConn struct {
	h      *API
	conn   *websocket.Conn
	tenant string
	hdr    http.Header
	// writeCtx outlives the turns: a turn ended by the connection limit
	// or a shutdown still sends its final event.
	writeCtx context.Context
	// last is the last response's whole context, nil before the first
	// one completes.
	last *wire.PriorContext
	// warm is the last warmup (generate:false), nil when none is
	// pending.
	warm *wsWarmup
	m    *wsMetrics
}

// wsWarmup is a response.create with generate:false: no output, only its
// input and the response it continues, which the turn that continues it
// takes over.
type wsWarmup struct {
	id, prev string
	input    []wire.Item
}

// websocket serves GET /v1/responses upgraded to a WebSocket: each
// response.create message makes a response whose stream events come
// back as text messages, in order; a request error is an error event and
// the connection stays open.
func (h *API) websocket(c echo.Context) error {
	r := c.Request()
	if !isUpgrade(r) {
		return apierror.New(http.StatusMethodNotAllowed, "method_not_allowed",
			"GET /v1/responses serves WebSocket connections only; send a WebSocket upgrade, or POST to create a response.")
	}
	conn, err := websocket.Accept(c.Response(), r, nil)
	if err != nil {
		// Accept has written the refusal.
		return nil
	}
	conn.SetReadLimit(h.opts.MessageLimit)
	limit := h.opts.WebSocketLimit
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	// A gateway shutting down ends the connection's turn with its reason.
	stopWatch := context.AfterFunc(r.Context(), func() {
		if cause := context.Cause(r.Context()); h.f.ShuttingDown != nil && errors.Is(cause, h.f.ShuttingDown) {
			cancel(cause)
		}
	})
	defer stopWatch()
	timer := time.AfterFunc(limit, func() { cancel(errConnectionLimit) })
	defer timer.Stop()

	// The reader runs apart from the turns so that a client going away
	// cancels the turn in flight.
	msgs := make(chan []byte)
	readCtx := context.WithoutCancel(r.Context())
	go func() {
		defer close(msgs)
		for {
			// Not ctx: a read whose context ends closes the connection,
			// and the connection limit still has its error to send.
			typ, data, err := conn.Read(readCtx)
			if err != nil {
				cancel(context.Canceled)
				return
			}
			if typ != websocket.MessageText {
				data = nil
			}
			select {
			case msgs <- data:
			case <-ctx.Done():
				return
			}
		}
	}()
	// The connection's turns keep to the replica its first turn went to.
	turnCtx := dispatch.WithAffinity(ctx, &dispatch.Affinity{})
	ws := &wsConn{h: h, conn: conn, tenant: h.f.Tenant(c), hdr: r.Header.Clone(), writeCtx: readCtx, m: h.m}
	ws.m.open.Inc()
	defer ws.m.open.Dec()
	for {
		select {
		case data, ok := <-msgs:
			if !ok {
				ws.m.closed.WithLabelValues("client").Inc()
				conn.CloseNow()
				return nil
			}
			ws.serve(turnCtx, data)
			if !errors.Is(context.Cause(ctx), errConnectionLimit) {
				continue
			}
		case <-ctx.Done():
		}
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, errConnectionLimit):
			ws.m.closed.WithLabelValues("limit").Inc()
			ws.limitReached(limit)
			return nil
		case h.f.ShuttingDown != nil && errors.Is(cause, h.f.ShuttingDown):
			ws.m.closed.WithLabelValues("shutdown").Inc()
		default:
			ws.m.closed.WithLabelValues("client").Inc()
		}
		conn.CloseNow()
		return nil
	}
}

// limitReached tells the client its connection reached its time limit
// and closes it.
func (ws *wsConn) limitReached(limit time.Duration) {
	e := apierror.Invalid("", "websocket_connection_limit_reached",
		"Responses websocket connection limit reached (%s). Create a new websocket connection to continue.", limitText(limit))
	ws.sendError(e)
	ws.conn.Close(websocket.StatusNormalClosure, "connection limit reached")
}

func limitText(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return fmt.Sprintf("%d minutes", int(d/time.Minute))
	}
	return d.String()
}

func isUpgrade(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		if len(v) == len("websocket") && equalFold(v, "websocket") {
			return true
		}
	}
	return false
}

func equalFold(a, b string) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// serve answers one message.
func (ws *wsConn) serve(ctx context.Context, data []byte) {
	req, generate, err := ws.decode(data)
	if err != nil {
		ws.m.messages.WithLabelValues("error").Inc()
		ws.sendError(err)
		return
	}
	if w := ws.warm; w != nil && req.PreviousResponseID == w.id {
		// The turn a warmup prepared: its input goes first.
		req.PreviousResponseID = w.prev
		req.Input = append(append([]wire.Item(nil), w.input...), req.Input...)
	}
	ws.warm = nil
	if ws.last != nil && req.PreviousResponseID == ws.last.ID {
		req.Prior = ws.last
	}
	if !generate {
		ws.m.messages.WithLabelValues("warmup").Inc()
		ws.warmup(req)
		return
	}
	if tr := ws.h.opts.Tracer; tr.On() {
		// A span per turn, each a child of the client's traceparent
		// on the upgrade request, if it sent one.
		var span trace.Span
		ctx, span = tr.StartTurn(tr.Extract(ctx, ws.hdr), tracing.OpResponses, req.Model)
		defer span.End()
	}
	resp, err := ws.h.opts.Service.Create(ctx, ws.tenant, req, ws.hdr, responses.SinkFunc(ws.write))
	endResponseSpan(ctx, resp, err)
	if err != nil {
		ws.m.messages.WithLabelValues("error").Inc()
		ws.sendError(err)
		return
	}
	ws.m.messages.WithLabelValues("response").Inc()
	ws.remember(req, resp)
}

// write sends one event as a text message.
func (ws *wsConn) write(_ string, data []byte) error {
	ctx, cancel := context.WithTimeout(ws.writeCtx, wsWriteTimeout)
	defer cancel()
	return ws.conn.Write(ctx, websocket.MessageText, data)
}

// warmup answers a response.create with generate:false as OpenAI does: a
// response with no output and no usage whose id a later turn continues
// with previous_response_id, that turn then carrying the warmup's input.
// The warmup reaches no engine; it is kept on the connection only.
func (ws *wsConn) warmup(req *wire.CreateRequest) {
	now := time.Now().Unix()
	resp := responses.WarmupResponse(req, now)
	if ws.sendEvent(&responses.Event{Type: "response.created", SequenceNumber: 0, Response: resp}) != nil {
		return
	}
	done := *resp
	done.Status, done.CompletedAt, done.Usage = wire.StatusCompleted, &now, &wire.Usage{}
	if ws.sendEvent(&responses.Event{Type: "response.completed", SequenceNumber: 1, Response: &done}) != nil {
		return
	}
	ws.warm = &wsWarmup{id: resp.ID, prev: req.PreviousResponseID, input: req.Input}
}

func (ws *wsConn) sendEvent(ev *responses.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return ws.write(ev.Type, b)
}

// remember keeps the response's whole context as the connection's last.
func (ws *wsConn) remember(req *wire.CreateRequest, resp *wire.Response) {
	p := &wire.PriorContext{ID: resp.ID, Session: resp.ID}
	if req.Prior != nil {
		p.Session = req.Prior.Session
		p.Items = append(p.Items, req.Prior.Items...)
	} else if req.PreviousResponseID != "" {
		// Continued from the store, which holds that context and this
		// response's when it is stored: the next turn goes through it.
		ws.last = nil
		return
	}
	p.Items = append(p.Items, req.Input...)
	p.Items = append(p.Items, resp.Output...)
	ws.last = p
}

// decode reads a response.create message: the body of POST
// /v1/responses with a type, streamed whatever it says, and the
// WebSocket-only generate (default true).
func (ws *wsConn) decode(data []byte) (req *wire.CreateRequest, generate bool, err error) {
	if data == nil {
		return nil, false, apierror.Invalid("", "invalid_message", "Expected a text message holding a JSON object.")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, false, apierror.Invalid("", "invalid_json", "The message is not a JSON object: %v", err)
	}
	var typ string
	if err := json.Unmarshal(fields["type"], &typ); err != nil || typ == "" {
		return nil, false, apierror.Invalid("type", "missing_required_parameter", "Missing required parameter: 'type'.")
	}
	if typ != "response.create" {
		return nil, false, apierror.Invalid("type", "invalid_value", "Invalid value: '%s'. Supported values are: 'response.create'.", typ)
	}
	generate = true
	if raw, ok := fields["generate"]; ok {
		if err := json.Unmarshal(raw, &generate); err != nil {
			return nil, false, apierror.Invalid("generate", "invalid_type", "Invalid type for 'generate': expected a boolean.")
		}
	}
	if _, ok := fields["stream_id"]; ok {
		return nil, false, apierror.Invalid("stream_id", "unsupported_parameter",
			"Multiplexed streams (stream_id) are not supported: open one WebSocket connection per conversation.")
	}
	delete(fields, "type")
	delete(fields, "stream")
	delete(fields, "generate")
	if req, err = wire.DecodeCreateFields(fields); err != nil {
		return nil, false, err
	}
	if req.Background {
		return nil, false, apierror.Invalid("background", "unsupported_value", "Background responses are not supported over a WebSocket connection.")
	}
	req.Stream = true
	return req, generate, nil
}

// sendError sends err as an error event.
func (ws *wsConn) sendError(err error) {
	e := ws.h.f.Error(err)
	b, merr := json.Marshal(wsEvent{Type: "error", Status: e.Status, Error: e})
	if merr != nil {
		return
	}
	_ = ws.write("error", b)
}

// wsMetrics count Responses WebSocket connections and their messages.
type wsMetrics struct {
	open     prometheus.Gauge
	messages *prometheus.CounterVec
	closed   *prometheus.CounterVec
}

// newWSMetrics makes the WebSocket collectors and registers them on reg,
// unless it is nil.
func newWSMetrics(reg prometheus.Registerer) *wsMetrics {
	m := &wsMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "turnpike_websocket_connections",
			Help: "Responses WebSocket connections open.",
		}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_websocket_messages_total",
			Help: "Messages received on Responses WebSocket connections, by what they became: response, warmup (generate:false) or error.",
		}, []string{"kind"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_websocket_closed_total",
			Help: "Responses WebSocket connections ended, by reason: client, limit (the connection time limit) or shutdown.",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.open, m.messages, m.closed)
	}
	return m
}
