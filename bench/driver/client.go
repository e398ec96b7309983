package driver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"

	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Headers the benchmark sends and reads.
const (
	HeaderSessionID     = "x-session-id"
	HeaderPriority      = "x-turnpike-priority"
	HeaderDroppedReason = "x-turnpike-dropped-reason"
)

// Error classes in Sample.Error, besides "http_<status>"; all but
// ErrClassCanceled, a request the bench cut itself (Summary.Cut), are
// counted in Summary.ErrorsByClass.
const (
	ErrClassTimeout   = "timeout"
	ErrClassCanceled  = "canceled"
	ErrClassTransport = "transport"
	ErrClassStream    = "stream"
)

// Call is one request to send: who sends it, with what input.
type Call struct {
	// API is workload.APIResponses or workload.APIChat.
	API string
	// Key is the API key it is sent with; Priority its x-turnpike-priority
	// ("": none).
	Key      string
	Priority string
	// Session is sent as x-session-id when not empty.
	Session string
	// PreviousID chains a Responses call; Input is then only the new items.
	PreviousID string
	Input      []workload.Item
	// MaxTokens is the output asked for.
	MaxTokens int
	// Model is the model asked for; "" is the run's (Config.Model).
	Model string
}

// modelOf is the model c asks for.
func (s *sender) modelOf(c *Call) string {
	if c.Model != "" {
		return c.Model
	}
	return s.model
}

// outcome is what one call measured.
type outcome struct {
	start        time.Time
	ttft         time.Duration // 0: no content arrived
	e2e          time.Duration
	itl          []time.Duration
	inputTokens  int
	outputTokens int
	cachedTokens int
	status       int
	// streamed is set once the first stream event arrived: from then on
	// the client has seen the turn answering.
	streamed bool
	errClass string
	// errCode is the error body's code of an HTTP error ("no-endpoints").
	errCode string
	dropped string
	// retryAfter is a shed answer's Retry-After; zero if none.
	retryAfter time.Duration
	responseID string
	// reply is the streamed text, kept for chat histories.
	reply string
}

// sender owns one OpenAI client per API key and sends calls.
type sender struct {
	clients map[string]openai.Client
	// transports are the clients' connection pools, closed by close.
	transports []*http.Transport
	base       []option.RequestOption
	model      string
	freeOutput bool
	timeout    time.Duration
	keepReply  bool
}

// apiBase is the OpenAI API's base under a gateway URL given with or
// without its /v1.
func apiBase(url string) string {
	base := strings.TrimRight(url, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	return base
}

func newSender(cfg workload.Config, target Target, keepReply bool) *sender {
	return &sender{
		clients: map[string]openai.Client{},
		base: []option.RequestOption{
			option.WithBaseURL(apiBase(target.BaseURL) + "/"),
			// A shed request is a figure to count, not a request to retry.
			option.WithMaxRetries(0),
		},
		model:      cfg.Model,
		freeOutput: cfg.FreeOutputLength,
		timeout:    cfg.RequestTimeout.D(),
		keepReply:  keepReply,
	}
}

// client returns the client for key; clients are made before the run starts
// (see prepare), so this map is only read concurrently.
func (s *sender) client(key string) openai.Client {
	return s.clients[key]
}

// prepare makes a client for each key. Each has a connection pool of its
// own, as tenants' clients on their own machines would: with one pool, a
// burst of one tenant takes the idle connections of another, whose next
// request then waits for a dial behind the burst.
func (s *sender) prepare(keys ...string) {
	for _, k := range keys {
		if _, ok := s.clients[k]; ok {
			continue
		}
		transport := &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
			ForceAttemptHTTP2:   false,
		}
		s.transports = append(s.transports, transport)
		opts := append(append([]option.RequestOption(nil), s.base...),
			option.WithHTTPClient(&http.Client{Transport: transport}), option.WithAPIKey(k))
		s.clients[k] = openai.NewClient(opts...)
	}
}

// close closes the clients' idle connections once a run is over.
func (s *sender) close() {
	for _, t := range s.transports {
		t.CloseIdleConnections()
	}
}

// send streams one call and measures it. It never returns an error: every
// failure is classified into the outcome.
func (s *sender) send(ctx context.Context, c Call) outcome {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	var opts []option.RequestOption
	if c.Priority != "" {
		opts = append(opts, option.WithHeader(HeaderPriority, c.Priority))
	}
	if c.Session != "" {
		opts = append(opts, option.WithHeader(HeaderSessionID, c.Session))
	}
	cl := s.client(c.Key)
	var o outcome
	m := meter{keepReply: s.keepReply}
	o.start = time.Now()
	m.last = o.start
	var err error
	if c.API == workload.APIChat {
		err = s.streamChat(ctx, cl, c, opts, &m, &o)
	} else {
		err = s.streamResponses(ctx, cl, c, opts, &m, &o)
	}
	o.e2e = time.Since(o.start)
	o.ttft = m.ttft
	o.itl = m.itl
	o.reply = m.reply.String()
	if o.outputTokens == 0 {
		o.outputTokens = m.deltas
	}
	if err != nil {
		classify(ctx, err, &o)
	} else if o.status == 0 {
		o.status = http.StatusOK
	}
	return o
}

// meter timestamps content deltas.
type meter struct {
	last      time.Time
	ttft      time.Duration
	itl       []time.Duration
	deltas    int
	keepReply bool
	reply     strings.Builder
}

func (m *meter) delta(start time.Time, text string) {
	if text == "" {
		return
	}
	now := time.Now()
	if m.deltas == 0 {
		m.ttft = now.Sub(start)
	} else {
		m.itl = append(m.itl, now.Sub(m.last))
	}
	m.last = now
	m.deltas++
	if m.keepReply {
		m.reply.WriteString(text)
	}
}

// errStreamFailed reports a stream that ended in an error or failed event.
var errStreamFailed = errors.New("bench: stream ended in failure")

func (s *sender) streamResponses(ctx context.Context, cl openai.Client, c Call, opts []option.RequestOption, m *meter, o *outcome) error {
	params := responses.ResponseNewParams{
		Model:           s.modelOf(&c),
		MaxOutputTokens: openai.Int(int64(c.MaxTokens)),
		Input:           responses.ResponseNewParamsInputUnion{OfInputItemList: responsesInput(c.Input)},
	}
	if c.PreviousID != "" {
		params.PreviousResponseID = openai.String(c.PreviousID)
	}
	stream := cl.Responses.NewStreaming(ctx, params, opts...)
	defer stream.Close()
	completed := false
	for stream.Next() {
		o.streamed = true
		ev := stream.Current()
		switch ev.Type {
		case "response.created", "response.in_progress":
			if ev.Response.ID != "" {
				o.responseID = ev.Response.ID
			}
		case "response.output_text.delta", "response.refusal.delta":
			m.delta(o.start, ev.Delta)
		case "response.completed", "response.incomplete":
			completed = true
			if ev.Response.ID != "" {
				o.responseID = ev.Response.ID
			}
			u := ev.Response.Usage
			o.inputTokens = int(u.InputTokens)
			o.outputTokens = int(u.OutputTokens)
			o.cachedTokens = int(u.InputTokensDetails.CachedTokens)
		case "response.failed", "error":
			return errStreamFailed
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	if !completed {
		return errStreamFailed
	}
	return nil
}

func (s *sender) streamChat(ctx context.Context, cl openai.Client, c Call, opts []option.RequestOption, m *meter, o *outcome) error {
	params := openai.ChatCompletionNewParams{
		Model:               s.modelOf(&c),
		Messages:            chatMessages(c.Input),
		MaxTokens:           openai.Int(int64(c.MaxTokens)),
		MaxCompletionTokens: openai.Int(int64(c.MaxTokens)),
		StreamOptions:       openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if !s.freeOutput {
		// vLLM and SGLang extensions: emit exactly maxTokens tokens, so
		// every policy decodes the same amount.
		params.SetExtraFields(map[string]any{"ignore_eos": true, "min_tokens": c.MaxTokens})
	}
	stream := cl.Chat.Completions.NewStreaming(ctx, params, opts...)
	defer stream.Close()
	finished := false
	for stream.Next() {
		o.streamed = true
		chunk := stream.Current()
		if o.responseID == "" {
			o.responseID = chunk.ID
		}
		for _, ch := range chunk.Choices {
			m.delta(o.start, ch.Delta.Content)
			finished = finished || ch.FinishReason != ""
		}
		if chunk.Usage.PromptTokens > 0 || chunk.Usage.CompletionTokens > 0 {
			o.inputTokens = int(chunk.Usage.PromptTokens)
			o.outputTokens = int(chunk.Usage.CompletionTokens)
			o.cachedTokens = int(chunk.Usage.PromptTokensDetails.CachedTokens)
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	if !finished {
		// The body ended without a finish reason: cut, with or without
		// [DONE] (the SDK reads a bare EOF as the end).
		return errStreamFailed
	}
	return nil
}

// classify turns err into an error class, status and shed reason.
func classify(ctx context.Context, err error, o *outcome) {
	var apiErr *openai.Error
	var streamErr *ssestream.StreamError
	switch {
	case errors.As(err, &apiErr):
		o.status = apiErr.StatusCode
		o.errClass = httpClass(apiErr.StatusCode)
		o.errCode = apiErr.Code
		if apiErr.Response != nil {
			o.dropped = apiErr.Response.Header.Get(HeaderDroppedReason)
			if secs, err := strconv.Atoi(apiErr.Response.Header.Get("Retry-After")); err == nil && secs > 0 {
				o.retryAfter = time.Duration(secs) * time.Second
			}
		}
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		o.errClass = ErrClassTimeout
	case ctx.Err() != nil || errors.Is(err, context.Canceled):
		o.errClass = ErrClassCanceled
	case errors.As(err, &streamErr) || errors.Is(err, errStreamFailed):
		o.errClass = ErrClassStream
	default:
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			o.errClass = ErrClassTimeout
		} else {
			o.errClass = ErrClassTransport
		}
	}
}

func httpClass(status int) string {
	return "http_" + itoa(status)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// responsesInput converts items to Responses input items.
func responsesInput(items []workload.Item) responses.ResponseInputParam {
	out := make(responses.ResponseInputParam, 0, len(items))
	for _, it := range items {
		switch it.Kind {
		case workload.ItemFunctionCall:
			out = append(out, responses.ResponseInputItemParamOfFunctionCall(it.Text, it.CallID, it.Name))
		case workload.ItemFunctionCallOutput:
			u := responses.ResponseInputItemParamOfFunctionCallOutput(it.Text)
			u.OfFunctionCallOutput.CallID = openai.String(it.CallID)
			out = append(out, u)
		default:
			out = append(out, responses.ResponseInputItemParamOfMessage(it.Text, responses.EasyInputMessageRole(it.Role)))
		}
	}
	return out
}

// chatMessages converts items to chat messages; a function call becomes an
// assistant message with one tool call, its output a tool message.
func chatMessages(items []workload.Item) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(items))
	for _, it := range items {
		switch it.Kind {
		case workload.ItemFunctionCall:
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
				ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       it.CallID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: it.Name, Arguments: it.Text},
					},
				}},
			}})
		case workload.ItemFunctionCallOutput:
			out = append(out, openai.ToolMessage(it.Text, it.CallID))
		default:
			switch it.Role {
			case "system":
				out = append(out, openai.SystemMessage(it.Text))
			case "assistant":
				out = append(out, openai.AssistantMessage(it.Text))
			default:
				out = append(out, openai.UserMessage(it.Text))
			}
		}
	}
	return out
}
