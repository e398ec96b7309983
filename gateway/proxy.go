package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/tracing"
	"go.opentelemetry.io/otel/trace"
)

func (s *Server) handleChatCompletions(c echo.Context) error {
	return s.proxyCompletion(c, "/v1/chat/completions", prompt.ChatBody, s.memo.ParseChatIn)
}

func (s *Server) handleCompletions(c echo.Context) error {
	return s.proxyCompletion(c, "/v1/completions", prompt.CompletionBody, parseCompletion)
}

// parseCompletion is prompt.ParseCompletion in proxyCompletion's shape.
func parseCompletion(body, _ []byte) (*prompt.Request, error) { return prompt.ParseCompletion(body) }

// proxyCompletion forwards a chat or text completion to an endpoint of a
// pool serving its model, streaming the answer back as it comes. The body
// is decoded once, by parse, and forwarded as the client wrote it; one
// that is longer than its model's context by its length alone is refused
// first. parse decodes the body's strings into text, the spare room of
// the body's pooled buffer, where they fit.
func (s *Server) proxyCompletion(c echo.Context, path string, kind prompt.BodyKind, parse func(body, text []byte) (*prompt.Request, error)) error {
	start := time.Now()
	param := "messages"
	if kind == prompt.CompletionBody {
		param = "prompt"
	}
	var buf *bytes.Buffer
	body, err := s.readChecked(c, kind, param, func(staged []byte) ([]byte, error) {
		var err error
		if buf, err = readPooledBody(c, staged); err != nil {
			return nil, err
		}
		return buf.Bytes()[bodyHeadroom:], nil
	})
	if buf != nil {
		// The body is reused for another request once this one has ended.
		defer putBody(buf)
	}
	if err != nil {
		return err
	}
	// req aliases body, and the strings decoded into the buffer's spare
	// room after it, so body is never written to: it is forwarded as it
	// is, or with a member spliced in before it by withStreamUsage.
	req, err := parse(body, buf.AvailableBuffer())
	if err != nil {
		return err
	}
	spec := &dispatch.Spec{
		Tenant: tenantOf(c),
		// The strings that outlive the request (session keys, the model
		// in routing state) are copied out of the body, which is reused.
		Model:          strings.Clone(req.Model),
		Path:           path,
		Body:           body,
		ClientHeader:   c.Request().Header,
		PromptCacheKey: strings.Clone(req.PromptCacheKey),
		// A stateless client's turns with one safety_identifier and the
		// same opening are one session.
		SafetyIdentifier: strings.Clone(req.SafetyIdentifier),
		ServiceTier:      req.ServiceTier,
		Prompt:           &req.Prompt,
		Tokens:           req.TokenIDs,
		MaxOutputTokens:  req.MaxOutputTokens(),
		Prior:            req.Prior,
	}
	// Routing learns from every answer's usage (cached tokens, prefill
	// rate), so a stream is asked for it even when the client did not ask;
	// the extra usage chunk is then kept from the client.
	strip := false
	if req.Stream && !req.IncludeUsage {
		if b, ok := withStreamUsage(buf.Bytes(), req.HasStreamOptions); ok {
			spec.Body, strip = b, true
		}
	}
	s.nameModelRule(c, spec.Tenant, spec.Model)
	ctx := c.Request().Context()
	var span trace.Span
	if tr := s.opts.Tracer; tr.On() {
		ctx, span = s.startTurn(c, path, spec.Model)
		defer span.End()
	}
	t, err := s.dispatch.Begin(ctx, spec)
	if err != nil {
		s.metrics.observeRequest(path, toAPIError(err).Status, start, 0)
		if span != nil {
			tracing.Fail(span, err)
		}
		return err
	}
	if l := t.RateLimits(); l != nil {
		l.Set(c.Response().Header())
	}
	// A client that asks sees what routing predicted cached (docs/cache.md).
	if c.Request().Header.Get(dispatch.CacheHeader) != "" {
		if p, ok := t.CachePrediction(); ok {
			c.Response().Header().Set(dispatch.CacheHeader, p.String())
		}
	}
	if req.Stream {
		err := s.relayStream(c, t, strip)
		t.End(err)
		if span != nil {
			endTurnSpan(span, t.ResponseID(), err)
		}
		s.metrics.observeRequest(path, http.StatusOK, start, t.TTFT())
		return nil
	}
	b, err := t.ReadAll()
	t.End(err)
	if span != nil {
		endTurnSpan(span, t.ResponseID(), err)
	}
	if err != nil {
		return err
	}
	s.metrics.observeRequest(path, http.StatusOK, start, 0)
	c.Response().Header().Set(echo.HeaderContentType, t.Header().Get(echo.HeaderContentType))
	c.Response().WriteHeader(http.StatusOK)
	_, err = c.Response().Write(b)
	return err
}

// nameModelRule names, in the response's header, the rule that rewrites
// the request's model, if one does.
func (s *Server) nameModelRule(c echo.Context, tenant, model string) {
	if rule := s.dispatch.ModelRule(tenant, model, c.Request().Header); rule != "" {
		c.Response().Header().Set(dispatch.ModelRuleHeader, rule)
	}
}

// startTurn starts the span of a chat or text completion turn, under the
// client's trace context.
func (s *Server) startTurn(c echo.Context, path, model string) (context.Context, trace.Span) {
	op := tracing.OpChat
	if path == "/v1/completions" {
		op = tracing.OpTextCompletion
	}
	tr := s.opts.Tracer
	return tr.StartTurn(tr.Extract(c.Request().Context(), c.Request().Header), op, model)
}

// endTurnSpan notes the answer's id and the turn's failure on its span;
// the caller ends it.
func endTurnSpan(span trace.Span, id string, err error) {
	if id != "" && span.IsRecording() {
		span.SetAttributes(tracing.ResponseID.String(id))
	}
	tracing.Fail(span, err)
}

// bodyBufs recycles request bodies: agents' bodies are large, and the
// garbage of one per request is most of a turn's allocated bytes.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody keeps one huge body from pinning its buffer forever: a
// buffer holds a body and room as large again for its decoded strings.
const maxPooledBody = 8 << 20

// readPooledBody reads the request body, or copies staged, the body
// already read (readChecked), into a pooled buffer sized from its
// length, after bodyHeadroom bytes of room: the body is
// buf.Bytes()[bodyHeadroom:]. As much room again is left after one read
// from the client, for
// the strings the parser decodes (buf.AvailableBuffer()), which decode to
// no more bytes than they take in the body, stray bytes apart. The
// caller gives it back with putBody once nothing refers to the body or
// its decoded strings any more.
func readPooledBody(c echo.Context, staged []byte) (*bytes.Buffer, error) {
	r := c.Request()
	buf := bodyBufs.Get().(*bytes.Buffer)
	buf.Reset()
	var room [bodyHeadroom]byte
	if staged != nil {
		// A staged body is one whose escapes make it longer than its
		// text could be: room for its strings would be mostly waste.
		buf.Grow(bodyHeadroom + len(staged))
		buf.Write(room[:])
		buf.Write(staged)
		return buf, nil
	}
	buf.Grow(bodyHeadroom + 2*bodyRoom(r))
	buf.Write(room[:])
	if _, err := buf.ReadFrom(r.Body); err != nil {
		putBody(buf)
		return nil, err
	}
	return buf, nil
}

// bodyRoom is the room to read r's body into at once: the length it
// states (the body limit has bounded it), so that an agent's history is
// read in one allocation, not a dozen, with bytes.MinRead spare for
// ReadFrom's last read, which finds the end; 0 when it states none.
func bodyRoom(r *http.Request) int {
	if n := r.ContentLength; n > 0 && n <= 64<<20 {
		return int(n) + bytes.MinRead
	}
	return 0
}

func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBody {
		bodyBufs.Put(buf)
	}
}

// withStreamUsage returns body with stream_options.include_usage set. A
// body without stream_options gets the member spliced in after its
// opening brace, without re-encoding; one with its own stream_options
// (include_usage false or absent, rarer) has the member merged into them
// in place, since a duplicate key would not be read alike by every
// engine.
//
// buf is what readPooledBody read: bodyHeadroom bytes of room, then the
// body. The member is spliced in place: the opening (the brace and any
// space before it) moves back into the room and the member takes its
// place, so the rest of the body, which the parsed request aliases, is
// neither copied nor written to.
func withStreamUsage(buf []byte, hasOptions bool) ([]byte, bool) {
	body := buf[bodyHeadroom:]
	open := bytes.IndexByte(body, '{')
	if open < 0 {
		return nil, false
	}
	if hasOptions {
		return mergeStreamUsage(body)
	}
	start := bodyHeadroom - len(usageMember)
	copy(buf[start:], body[:open+1])
	copy(buf[start+open+1:], usageMember)
	return buf[start:], true
}

// usageMember asks an engine for a stream's usage.
const usageMember = `"stream_options":{"include_usage":true},`

// bodyHeadroom is the room readPooledBody leaves before a body: what
// withStreamUsage needs to splice usageMember in without a copy.
const bodyHeadroom = len(usageMember)

// mergeStreamUsage sets include_usage in the body's own stream_options
// (null reads as none), the rest of the body as it came.
func mergeStreamUsage(body []byte) ([]byte, bool) {
	opts, _, err := jsonscan.Lookup(body, "stream_options")
	if err != nil {
		return nil, false
	}
	if len(opts) == 0 || string(opts) == "null" {
		opts = []byte("{}")
	}
	opts, err = jsonscan.Edit(opts, []jsonscan.Member{{Key: "include_usage", Value: []byte("true")}})
	if err != nil {
		return nil, false
	}
	out, err := jsonscan.Edit(body, []jsonscan.Member{{Key: "stream_options", Value: opts}})
	return out, err == nil
}

// The error events that end a relayed stream early.
var (
	streamCutEvent = []byte("data: {\"error\":{\"message\":\"The model server stopped in the middle of the stream.\",\"type\":\"server_error\",\"param\":null,\"code\":\"upstream_error\"}}\n\n")
	shutdownEvent  = []byte("data: {\"error\":{\"message\":\"The gateway is shutting down; retry the request.\",\"type\":\"server_error\",\"param\":null,\"code\":\"server_shutting_down\"}}\n\n")
)

// relayStream copies an engine's SSE stream to the client line by line,
// flushing at every event boundary after which the engine has sent
// nothing more yet (so each event at once while the gateway keeps up, and
// a burst of them in one write when it falls behind; with
// Options.FlushInterval, the events of an interval in one write); with
// strip, the usage chunk is not passed on (the client did not ask for it). If the engine fails
// mid-stream the client gets an error event and the stream ends without
// [DONE]: the status line has long been sent. A line the failure cut
// short is never sent, so no event is cut JSON.
func (s *Server) relayStream(c echo.Context, t *dispatch.Turn, strip bool) error {
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if !t.Pending() {
		// The status goes out at once, for a client that waits on it, unless
		// the first event is already here to go with it.
		w.Flush()
	}

	// inEvent: an event's lines were written and its blank line was not
	// yet; skipBlank: the event being dropped still has its blank line;
	// unflushed: lines were written since the last flush.
	inEvent, skipBlank, unflushed := false, false, false
	for {
		l, err := t.Next()
		shutdown := err != nil && errors.Is(context.Cause(c.Request().Context()), ErrShuttingDown)
		if errors.Is(err, dispatch.ErrStreamCut) || shutdown {
			event := streamCutEvent
			if shutdown {
				event = shutdownEvent
				err = ErrShuttingDown
			}
			s.log.Warn("stream ended early", "request_id", w.Header().Get(echo.HeaderXRequestID), "err", err)
			if inEvent {
				w.Write([]byte("\n"))
			}
			w.Write(event)
			w.Flush()
			return err
		}
		if err != nil {
			// io.EOF: the stream ended on a line boundary. What is unflushed
			// goes out with the end of the response body, in one write, when
			// the handler returns.
			return ignoreEOF(err)
		}
		switch {
		case l.Usage && strip:
			skipBlank = true
		case l.Blank && skipBlank:
			skipBlank = false
		default:
			if _, err := w.Write(l.Raw); err != nil {
				return err
			}
			inEvent = !l.Blank
			unflushed = true
		}
		if unflushed && !inEvent && !t.Pending() {
			// What the engine sent while the gateway was behind goes out
			// in one write; with a flush interval, so does what it sends
			// within the interval.
			w.Flush()
			unflushed = false
			t.Linger(s.opts.FlushInterval)
		}
	}
}
