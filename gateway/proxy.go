package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// maxUpstreamBody bounds a non-streamed engine answer held in memory.
const maxUpstreamBody = 64 << 20

// engineRequest is the part of a chat or text completion request the
// gateway reads; the body itself is forwarded untouched.
type engineRequest struct {
	Model               string          `json:"model"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	PromptCacheKey      string          `json:"prompt_cache_key"`
	ServiceTier         string          `json:"service_tier"`
	Tools               json.RawMessage `json:"tools"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// withStreamUsage returns body with stream_options.include_usage set.
func withStreamUsage(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := m["stream_options"]; ok && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, err
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	m["stream_options"] = raw
	return json.Marshal(m)
}

// decodeEngineRequest reads a chat (chat=true) or text completion request
// and checks the fields the gateway relies on.
func decodeEngineRequest(body []byte, chat bool) (*engineRequest, error) {
	var r engineRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, decodeError(err)
	}
	if r.Model == "" {
		return nil, invalid("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if chat {
		if len(r.Messages) == 0 || bytes.Equal(r.Messages, []byte("null")) {
			return nil, invalid("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(r.Messages, &msgs); err != nil {
			return nil, invalid("messages", "invalid_type", "Invalid type for 'messages': expected an array of message objects.")
		}
		if len(msgs) == 0 {
			return nil, invalid("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1.")
		}
	} else if len(r.Prompt) == 0 || bytes.Equal(r.Prompt, []byte("null")) {
		return nil, invalid("prompt", "missing_required_parameter", "Missing required parameter: 'prompt'.")
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", r.MaxTokens}, {"max_completion_tokens", r.MaxCompletionTokens}} {
		if p.v != nil && *p.v < 1 {
			return nil, invalid(p.name, "integer_below_min_value", "Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", p.name, *p.v)
		}
	}
	return &r, nil
}

// decodeError turns a json error into a 400 that says what was wrong where.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return invalid(te.Field, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return invalid("", "invalid_json", "We could not parse the JSON body of your request: %s at offset %d.", se.Error(), se.Offset)
	}
	return invalid("", "invalid_json", "We could not parse the JSON body of your request: %s.", err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int64", "int32", "float64", "float32":
		return "a number"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return goKind
}

func (r *engineRequest) maxOutputTokens() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return 0
}

func (s *Server) handleChatCompletions(c echo.Context) error {
	return s.proxyCompletion(c, "/v1/chat/completions", true)
}

func (s *Server) handleCompletions(c echo.Context) error {
	return s.proxyCompletion(c, "/v1/completions", false)
}

// proxyCompletion forwards a chat or text completion to an endpoint of a
// pool serving its model, streaming the answer back as it comes.
func (s *Server) proxyCompletion(c echo.Context, path string, chat bool) error {
	start := time.Now()
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return err
	}
	req, err := decodeEngineRequest(body, chat)
	if err != nil {
		return err
	}
	h := c.Request().Header
	sessionKey, _ := sessions.Derive(h, "", "", req.PromptCacheKey)
	in := &turnInput{
		path:            path,
		body:            body,
		clientHeader:    h,
		model:           req.Model,
		tenant:          tenantOf(c),
		sessionKey:      sessionKey,
		promptTokens:    kv.ApproxTokens(len(body)),
		maxOutputTokens: req.maxOutputTokens(),
		serviceTier:     req.ServiceTier,
	}
	if s.needsHashes {
		in.prompt = req.prompt()
	}
	// Routing learns from every answer's usage (cached tokens, prefill
	// rate), so a stream is asked for it even when the client did not ask;
	// the extra usage chunk is then kept from the client.
	strip := false
	if req.Stream && (req.StreamOptions == nil || !req.StreamOptions.IncludeUsage) {
		if b, err := withStreamUsage(body); err == nil {
			in.body, strip = b, true
		}
	}
	t, err := s.startTurn(c.Request().Context(), in)
	if err != nil {
		s.metrics.observeRequest(path, toAPIError(err).Status, start, 0)
		return err
	}
	defer t.resp.Body.Close()

	if req.Stream && t.resp.StatusCode == http.StatusOK {
		usage, err := s.relayStream(c, t, strip)
		t.finish(err, usage)
		var ttft time.Duration
		if !t.firstData.IsZero() {
			ttft = t.firstData.Sub(start)
		}
		s.metrics.observeRequest(path, http.StatusOK, start, ttft)
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(t.resp.Body, maxUpstreamBody+1))
	if err == nil && len(b) > maxUpstreamBody {
		err = fmt.Errorf("answer larger than %d bytes", maxUpstreamBody)
	}
	if err != nil {
		err = fmt.Errorf("%w: reading %s: %w", pools.ErrUpstream, t.ep.ID, err)
		t.finish(err, nil)
		return err
	}
	var u struct {
		Usage *usage `json:"usage"`
	}
	json.Unmarshal(b, &u)
	if t.resp.StatusCode >= 300 {
		// The engine refused (a 4xx is relayed as is): nothing was computed,
		// so routing must not count the prompt as cached there.
		t.finish(fmt.Errorf("gateway: engine answered %d", t.resp.StatusCode), nil)
	} else {
		t.finish(nil, u.Usage)
	}
	s.metrics.observeRequest(path, t.resp.StatusCode, start, 0)
	c.Response().Header().Set(echo.HeaderContentType, t.resp.Header.Get(echo.HeaderContentType))
	c.Response().WriteHeader(t.resp.StatusCode)
	_, err = c.Response().Write(b)
	return err
}

// usage is the engine's OpenAI usage block.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func outcome(err error, u *usage, ttft time.Duration) affinity.Outcome {
	o := affinity.Outcome{Err: err, TTFT: ttft}
	if u != nil {
		o.PromptTokens = u.PromptTokens
		o.CompletionTokens = u.CompletionTokens
		if u.PromptTokensDetails != nil {
			o.CachedTokens = u.PromptTokensDetails.CachedTokens
		}
	}
	return o
}

func (s *Server) modelNotFound(model string) error {
	return fmt.Errorf("%w: the model '%s' does not exist or is not served here", ErrModelNotFound, model)
}

// upstream is one request on its way to an engine.
type upstream struct {
	path   string
	body   []byte
	header http.Header
	route  *affinity.Request
}

// dispatch picks an endpoint and sends the request, retrying on another
// endpoint when the failure came before the engine's first byte (a
// connection error, an open breaker, a 5xx). Nothing is retried once the
// caller has the response. The caller owns the returned response.
func (s *Server) dispatch(ctx context.Context, up *upstream) (*http.Response, *pools.Endpoint, error) {
	var buf [16]*pools.Endpoint
	candidates := s.reg.EndpointsFor(buf[:0], up.route.Model)
	if len(candidates) == 0 {
		return nil, nil, s.modelNotFound(up.route.Model)
	}
	tokens := int64(up.route.PromptTokens + up.route.ExpectedOutputTokens)
	var lastErr error
	for attempt := 0; attempt <= s.reg.Options().MaxRetries && len(candidates) > 0; attempt++ {
		ep, err := s.policy.Pick(ctx, up.route, candidates)
		if err != nil {
			if lastErr != nil {
				return nil, nil, lastErr
			}
			return nil, nil, fmt.Errorf("%w: %w", ErrNoEndpoint, err)
		}
		resp, err := s.reg.Client().Send(ctx, ep, up.path, up.body, up.header, tokens)
		if err == nil {
			return resp, ep, nil
		}
		s.policy.Done(up.route, ep, affinity.Outcome{Err: err})
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		if !errors.Is(err, pools.ErrUpstream) && !errors.Is(err, pools.ErrBreakerOpen) {
			return nil, nil, err
		}
		s.log.Debug("retrying on another endpoint", "endpoint", ep.ID, "err", err)
		s.metrics.retries.Inc()
		lastErr = err
		candidates = without(candidates, ep)
	}
	return nil, nil, lastErr
}

// without removes ep from eps in place.
func without(eps []*pools.Endpoint, ep *pools.Endpoint) []*pools.Endpoint {
	for i, e := range eps {
		if e == ep {
			return append(eps[:i], eps[i+1:]...)
		}
	}
	return eps
}

// streamReaders recycles the line buffers of relayed streams.
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// relayStream copies an engine's SSE stream to the client, flushing at
// every event boundary, and returns the usage block if the stream carried
// one; with strip, the usage-only chunk is not passed on (the client did
// not ask for it). If the engine fails mid-stream the client gets an error
// event and the stream ends without [DONE]: the status line has long been
// sent. If it fails in the middle of a line, no event can follow a cut
// one, so the response is aborted instead.
func (s *Server) relayStream(c echo.Context, t *turn, strip bool) (*usage, error) {
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	w.Flush()

	var u *usage
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(t.resp.Body)
	defer func() { br.Reset(nil); streamReaders.Put(br) }()
	// atLineStart: the last byte written ended a line; inEvent: an event's
	// lines were written and its blank line was not yet.
	atLineStart, inEvent, skipBlank := true, false, false
	for {
		line, err := br.ReadSlice('\n')
		complete := len(line) > 0 && line[len(line)-1] == '\n'
		if len(line) > 0 {
			drop := false
			if atLineStart && complete {
				ev := scanEvent(line)
				if ev.data {
					t.sawData()
				}
				if ev.usage != nil {
					u = ev.usage
					drop = strip
				}
				blank := len(bytes.TrimSpace(line)) == 0
				if blank && skipBlank {
					drop = true
				}
				skipBlank = drop && !blank
			}
			if !drop {
				if _, werr := w.Write(line); werr != nil {
					return u, werr
				}
				if len(bytes.TrimSpace(line)) == 0 {
					w.Flush()
					inEvent = false
				} else {
					inEvent = true
				}
			}
			atLineStart = complete
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && atLineStart:
			w.Flush()
			return u, nil
		}
		if c.Request().Context().Err() != nil {
			return u, c.Request().Context().Err()
		}
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		s.log.Warn("engine stream broke", "request_id", w.Header().Get(echo.HeaderXRequestID), "err", err)
		if !atLineStart {
			t.finish(fmt.Errorf("%w: stream: %w", pools.ErrUpstream, err), u)
			panic(http.ErrAbortHandler)
		}
		if inEvent {
			w.Write([]byte("\n"))
		}
		w.Write([]byte("data: {\"error\":{\"message\":\"The model server stopped in the middle of the stream.\",\"type\":\"server_error\",\"param\":null,\"code\":\"upstream_error\"}}\n\n"))
		w.Flush()
		return u, fmt.Errorf("%w: stream: %w", pools.ErrUpstream, err)
	}
}
