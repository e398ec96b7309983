package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/responses"
)

// DefaultWebSocketLimit is how long a Responses WebSocket connection may
// live, as OpenAI allows.
const DefaultWebSocketLimit = 60 * time.Minute

// errConnectionLimit ends a connection that reached its time limit.
var errConnectionLimit = errors.New("websocket connection limit reached")

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
	h      *responsesAPI
	conn   *websocket.Conn
	tenant string
	hdr    http.Header
	// last is the last response's whole context, nil before the first
	// one completes.
	last *responses.PriorContext
}

// websocket serves GET /v1/responses upgraded to a WebSocket: each
// response.create message makes a response whose stream events come
// back as text messages, in order; a request error is an error event and
// the connection stays open.
func (h *responsesAPI) websocket(c echo.Context) error {
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
	conn.SetReadLimit(h.s.opts.BodyLimit)
	limit := h.s.opts.WebSocketLimit
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	defer cancel(nil)
	// A gateway shutting down ends the connection's turn with its reason.
	stopWatch := context.AfterFunc(r.Context(), func() {
		if cause := context.Cause(r.Context()); errors.Is(cause, ErrShuttingDown) {
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
	ws := &wsConn{h: h, conn: conn, tenant: tenantOf(c), hdr: r.Header.Clone()}
	for {
		select {
		case data, ok := <-msgs:
			if !ok {
				conn.CloseNow()
				return nil
			}
			ws.serve(ctx, data)
			if !errors.Is(context.Cause(ctx), errConnectionLimit) {
				continue
			}
		case <-ctx.Done():
		}
		if errors.Is(context.Cause(ctx), errConnectionLimit) {
			ws.limitReached(limit)
			return nil
		}
		conn.CloseNow()
		return nil
	}
}

// limitReached tells the client its connection reached its time limit
// and closes it.
func (ws *wsConn) limitReached(limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e := apierror.Invalid("", "websocket_connection_limit_reached",
		"Responses websocket connection limit reached (%s). Create a new websocket connection to continue.", limitText(limit))
	ws.sendError(ctx, e)
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
	req, err := ws.decode(data)
	if err != nil {
		ws.sendError(ctx, err)
		return
	}
	if ws.last != nil && req.PreviousResponseID == ws.last.ID {
		req.Prior = ws.last
	}
	sink := func(_ string, data []byte) error {
		return ws.conn.Write(ctx, websocket.MessageText, data)
	}
	resp, err := ws.h.svc.Create(ctx, ws.tenant, req, ws.hdr, sink)
	if err != nil {
		ws.sendError(ctx, err)
		return
	}
	ws.remember(req, resp)
}

// remember keeps the response's whole context as the connection's last.
func (ws *wsConn) remember(req *responses.CreateRequest, resp *responses.Response) {
	p := &responses.PriorContext{ID: resp.ID, Session: resp.ID}
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
// /v1/responses with a type, streamed whatever it says.
func (ws *wsConn) decode(data []byte) (*responses.CreateRequest, error) {
	if data == nil {
		return nil, apierror.Invalid("", "invalid_message", "Expected a text message holding a JSON object.")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, apierror.Invalid("", "invalid_json", "The message is not a JSON object: %v", err)
	}
	var typ string
	if err := json.Unmarshal(fields["type"], &typ); err != nil || typ == "" {
		return nil, apierror.Invalid("type", "missing_required_parameter", "Missing required parameter: 'type'.")
	}
	if typ != "response.create" {
		return nil, apierror.Invalid("type", "invalid_value", "Invalid value: '%s'. Supported values are: 'response.create'.", typ)
	}
	delete(fields, "type")
	delete(fields, "stream")
	body, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	req, err := responses.DecodeCreateRequest(body)
	if err != nil {
		return nil, err
	}
	if req.Background {
		return nil, apierror.Invalid("background", "unsupported_value", "Background responses are not supported over a WebSocket connection.")
	}
	req.Stream = true
	return req, nil
}

// sendError sends err as an error event.
func (ws *wsConn) sendError(ctx context.Context, err error) {
	e := toAPIError(err)
	b, merr := json.Marshal(wsEvent{Type: "error", Status: e.Status, Error: e})
	if merr != nil {
		return
	}
	_ = ws.conn.Write(ctx, websocket.MessageText, b)
}
