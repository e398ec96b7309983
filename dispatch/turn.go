package dispatch

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

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/budgets"
	"github.com/turnpike-gateway/turnpike/internal/netwake"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/turns"
	"go.opentelemetry.io/otel/trace"
)

// Limits on what a turn holds of an engine's answer.
const (
	// MaxAnswerBytes bounds a non-streamed answer held in memory.
	MaxAnswerBytes = 64 << 20
	// MaxLineBytes bounds one line of a streamed answer.
	MaxLineBytes = 16 << 20
	// maxErrorBytes bounds an engine's error body.
	maxErrorBytes = 64 << 10
)

// Usage is the engine's OpenAI usage block.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// Turn is a turn whose engine request has been answered. Its holder reads
// the answer through it (Next or ReadAll, once) and calls End once.
type Turn struct {
	ctx        context.Context
	d          *Dispatcher
	spec       *Spec
	route      affinity.Request
	sessionKey string
	touched    bool
	ticket     turns.Ticket
	// budget is what the turn was charged to its tenant's budgets; nil
	// when none applies.
	budget *budgets.Reservation
	// lent: the turn may go to a lent pool (it is of the background band,
	// and flow control, if any, granted it on a lent pool's room); onLent:
	// flow control granted it there, so it goes there while one of them is
	// available (see candidates).
	lent, onLent bool
	// band is the turn's band, sent as the engine's priority where it
	// schedules by priority (see withPriority).
	band turns.Band
	// tokens is the prompt encoded, when it was; bufs holds the pooled
	// buffers behind tokens and route.Hashes.
	tokens []uint32
	bufs   *buffers

	resp *http.Response
	ep   *pools.Endpoint
	// header, when set, is sent to every leg's engine (P/D: the same
	// X-Request-Id on both); pd is a disaggregated turn's prefill leg.
	header http.Header
	pd     *pdLeg
	// picked, when set, is the endpoint send tries first instead of
	// picking (the decoder the P/D decision was made for). stayed: the
	// turn went to the draining endpoint its session stays on while its
	// hand-off's warm-up runs; its answer is kept for a catch-up.
	picked *pools.Endpoint
	stayed bool
	// engine is the span of the current leg's engine request, decode the
	// decode leg's (P/D), both ended with the turn (trace.go); nil, or
	// spans that record nothing, when tracing is off. responseID is the
	// engine's answer id, kept only while tracing.
	engine, decode trace.Span
	responseID     string

	start, firstData time.Time
	// lingered is when the last Linger returned, or the second data line
	// was read; zero before. done: the [DONE] line was read.
	lingered time.Time
	done     bool
	usage    Usage
	hasUsage bool

	// br reads a streamed answer; long assembles a line longer than its
	// buffer.
	br   *bufio.Reader
	long []byte
	// lastBlank: the last line returned ended an event (or none was).
	lastBlank bool
	// sent is the data lines read so far, for a migration; legs counts
	// the migrations, priorCompletion the tokens generated before the
	// current leg.
	sent            sentLog
	legs            int
	priorCompletion int

	ended bool
	once  sync.Once
}

// Endpoint is the endpoint that answered.
func (t *Turn) Endpoint() *pools.Endpoint { return t.ep }

// Header is the engine's response header.
func (t *Turn) Header() http.Header { return t.resp.Header }

// Model is the served model the turn went to: the one its spec named, or
// the target (or fallback) of the rule that rewrote it.
func (t *Turn) Model() string { return t.spec.Model }

// SessionKey is the session the turn was counted in, "" for none.
func (t *Turn) SessionKey() string { return t.sessionKey }

// PromptTokens is the prompt's token count, computed once by Begin.
func (t *Turn) PromptTokens() int { return t.route.PromptTokens }

// Usage is the engine's usage block, if its answer carried one so far.
func (t *Turn) Usage() (Usage, bool) { return t.usage, t.hasUsage }

// TTFT is the time from Begin to the engine's first streamed data line;
// zero before it (and for a non-streamed answer).
func (t *Turn) TTFT() time.Duration {
	if t.firstData.IsZero() {
		return 0
	}
	return t.firstData.Sub(t.start)
}

// Line is one line of an engine's server-sent event stream.
type Line struct {
	// Raw is the line as the engine sent it, its newline included. It is
	// valid until the next call of Next.
	Raw []byte
	// Data is the payload of a data: line, trimmed; nil for other lines.
	Data []byte
	// Blank: the line ends an event.
	Blank bool
	// Done: the line is the [DONE] sentinel.
	Done bool
	// Usage: the line carries the usage block (now in Turn.Usage).
	Usage bool
}

// readers recycles the line buffers of streamed answers.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// Next returns the next whole line of a streamed answer. At the end of a
// stream that ended on a line boundary it returns io.EOF. When the
// engine's stream breaks, the turn moves to another endpoint, which
// continues the answer from the text generated so far (see
// pools.Options.MaxMigrations): the caller reads on as if nothing
// happened, after one blank line if the break came inside an event. When
// the stream cannot move, Next returns an error wrapping ErrStreamCut and
// pools.ErrUpstream (or the context's error when the caller went away); a
// line the break cut short is never returned.
func (t *Turn) Next() (Line, error) {
	if t.br == nil {
		t.br = readers.Get().(*bufio.Reader)
		t.br.Reset(t.resp.Body)
		t.lastBlank = true
	}
	for {
		l, err := t.next()
		if err == nil {
			t.lastBlank = l.Blank
			t.keep(&l)
			return l, nil
		}
		if !errors.Is(err, ErrStreamCut) || !t.migrate(err) {
			return Line{}, err
		}
		if !t.lastBlank {
			// The next leg's first event must not join the cut one.
			t.lastBlank = true
			return Line{Raw: []byte("\n"), Blank: true}, nil
		}
	}
}

// MaxFlushInterval bounds Linger's interval.
const MaxFlushInterval = time.Second

// Linger is for a consumer that writes a streamed answer to its client
// at most once every interval (server.flushInterval). Called when Pending
// is false, it waits for the end of the interval in which the last Linger
// returned, so that the next read takes in what the engine sent meanwhile
// in one system call and the consumer writes it in one, not a read and a
// write for each token; meanwhile the engine's connection does not wake
// the gateway as each token arrives (pools.HoldWakeups). Intervals are
// cut from one clock, the same for every stream, so that the streams'
// timers end together: one wakeup an interval for them all, not one for
// each. It reports whether it waited. It returns at once with every ≤ 0,
// when the interval has ended already (the engine is slower than every:
// the read would wait anyway), after the [DONE] line (only the stream's
// end is left), and until two data lines were read: the first is often
// the assistant's role alone, and the first token is never held.
func (t *Turn) Linger(every time.Duration) bool {
	if every <= 0 || t.lingered.IsZero() || t.done {
		return false
	}
	now := time.Now()
	wait := netwake.Wait(t.lingered, now, min(every, MaxFlushInterval))
	if wait <= 0 {
		t.lingered = now
		return false
	}
	pools.HoldWakeups(t.resp.Body)
	time.Sleep(wait)
	t.lingered = time.Now()
	return true
}

// Pending reports whether Next has a whole line to return without
// waiting for the engine: the engine sent more than has been read. A
// consumer that writes to its client as it reads uses it to write a burst
// of lines at once when it falls behind, and each line at once when it
// keeps up.
func (t *Turn) Pending() bool {
	if t.br == nil || t.br.Buffered() == 0 {
		return false
	}
	b, _ := t.br.Peek(t.br.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}

// next reads one whole line of the current leg.
func (t *Turn) next() (Line, error) {
	raw, err := t.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		t.long = append(t.long[:0], raw...)
		for errors.Is(err, bufio.ErrBufferFull) && len(t.long) <= MaxLineBytes {
			raw, err = t.br.ReadSlice('\n')
			t.long = append(t.long, raw...)
		}
		if err == nil && len(t.long) > MaxLineBytes {
			err = fmt.Errorf("a line longer than %d bytes", MaxLineBytes)
		}
		raw = t.long
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(raw) == 0 {
			return Line{}, io.EOF
		}
		return Line{}, t.cut(err)
	}
	return t.scan(raw), nil
}

// cut is the error of a stream that broke.
func (t *Turn) cut(err error) error {
	if cerr := t.ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %w: %s: %w", ErrStreamCut, pools.ErrUpstream, t.ep.ID, err)
}

// scan reads one whole line. The JSON is decoded only for lines that
// carry a usage block.
func (t *Turn) scan(raw []byte) Line {
	l := Line{Raw: raw}
	trimmed := bytes.TrimRight(raw, "\r\n")
	if len(bytes.TrimSpace(trimmed)) == 0 {
		l.Blank = true
		return l
	}
	payload, ok := bytes.CutPrefix(trimmed, []byte("data:"))
	if !ok {
		return l
	}
	l.Data = bytes.TrimSpace(payload)
	switch {
	case t.firstData.IsZero():
		t.firstData = time.Now()
		if t.d.tr.On() {
			t.responseID = answerID(l.Data)
		}
	case t.lingered.IsZero():
		// The second data line: Linger's intervals start here.
		t.lingered = time.Now()
	}
	l.Done = bytes.Equal(l.Data, []byte("[DONE]"))
	t.done = t.done || l.Done
	if len(l.Data) > 0 && l.Data[0] == '{' && bytes.Contains(l.Data, []byte(`"usage"`)) {
		l.Usage = t.readUsage(l.Data)
		if l.Usage && (t.priorCompletion > 0 || t.pd != nil) {
			t.rewriteUsage(&l)
		}
	}
	return l
}

// readUsage keeps the usage block of an answer or chunk, if it has one.
func (t *Turn) readUsage(data []byte) bool {
	u, ok := parseUsage(data)
	if !ok {
		return false
	}
	t.usage, t.hasUsage = u, true
	if t.priorCompletion > 0 {
		// A continued answer: the last leg counted only its own part.
		t.usage = t.combinedUsage(t.usage)
	}
	if t.pd != nil {
		t.pdUsage()
	}
	return true
}

// ReadAll reads a non-streamed answer whole, at most MaxAnswerBytes, and
// notes its usage block. An engine that dies before its answer is whole
// has sent the client nothing: the request goes to another endpoint, as
// often as a stream may move (pools.Options.MaxMigrations).
func (t *Turn) ReadAll() ([]byte, error) {
	for {
		b, err := io.ReadAll(io.LimitReader(t.resp.Body, MaxAnswerBytes+1))
		if err == nil && len(b) > MaxAnswerBytes {
			return nil, fmt.Errorf("%w: %s: answer larger than %d bytes", pools.ErrUpstream, t.ep.ID, MaxAnswerBytes)
		}
		if err == nil {
			if t.d.tr.On() {
				t.responseID = answerID(b)
			}
			if t.readUsage(b) && t.pd != nil {
				b = t.pdRewrite(b)
			}
			return b, nil
		}
		if cerr := t.ctx.Err(); cerr != nil {
			return nil, cerr
		}
		err = fmt.Errorf("%w: reading %s: %w", pools.ErrUpstream, t.ep.ID, err)
		if !t.resend(err) {
			return nil, err
		}
	}
}

// resend sends the turn's request again, to another endpoint, after its
// engine failed (cause) before the client saw anything of the answer. It
// reports whether the turn has a new answer to read.
func (t *Turn) resend(cause error) bool {
	if t.legs >= t.d.maxMigrations {
		return false
	}
	failed := t.ep
	if !t.sendAgain(t.spec.Body, cause) {
		return false
	}
	t.d.retries.Inc()
	t.d.log.Info("engine failed before its answer was whole; sent to another endpoint", "from", failed.ID, "to", t.ep.ID, "cause", cause)
	return true
}

// sendAgain gives up the current leg, whose engine failed (cause), and
// sends body to another endpoint as the next leg. On failure the turn
// holds no response; End still settles everything else.
func (t *Turn) sendAgain(body []byte, cause error) bool {
	d, failed := t.d, t.ep
	d.policy.Done(&t.route, failed, affinity.Outcome{Err: cause})
	t.endEngine(cause)
	t.resp.Body.Close()
	t.resp, t.ep = nil, nil
	err := t.send(t.ctx, body, failed)
	if err == nil && t.resp.StatusCode >= 300 {
		err = readEngineError(t.resp)
		t.endEngine(err)
		t.resp.Body.Close()
		d.policy.Done(&t.route, t.ep, affinity.Outcome{Err: err})
		t.resp, t.ep = nil, nil
	}
	if err != nil {
		d.log.Warn("engine failed mid-answer; no endpoint took it over", "endpoint", failed.ID, "err", err, "cause", cause)
		return false
	}
	t.legs++
	return true
}

// End ends the turn: err is nil when the engine's answer was whole, else
// why it was not. It closes the engine's body, tells routing the outcome
// (usage, time to first token), releases the flow-control ticket with
// the tokens the engine counted and ends the session's turn. It must be
// called exactly once.
func (t *Turn) End(err error) {
	if t.ended {
		panic("dispatch: turn ended twice")
	}
	t.ended = true
	if t.br != nil {
		t.br.Reset(nil)
		readers.Put(t.br)
		t.br = nil
	}
	if t.resp != nil {
		t.resp.Body.Close()
	}
	o := affinity.Outcome{Err: err, TTFT: t.TTFT()}
	if t.hasUsage {
		o.PromptTokens = t.usage.PromptTokens
		o.CompletionTokens = t.usage.CompletionTokens
		o.CachedTokens = t.usage.PromptTokensDetails.CachedTokens
	}
	if t.pd != nil {
		t.pdEnd()
		// The decoder computed none of the prompt: it pulled it.
		o.CachedTokens = o.PromptTokens
	}
	if t.d.tr.On() {
		t.endSpans(err)
	}
	if err == nil && t.ep != nil {
		t.d.revm.turnEnded(t.ep, &o)
		if t.touched && t.d.last != nil {
			// What a hand-off of the session re-sends; kept before release
			// gives the hashes back.
			p := t.d.lastPrompt(t)
			t.d.last.keep(p)
			t.d.handOffTurnEnded(t, &o)
			if t.stayed {
				t.d.catchUpMoved(p)
			}
		}
	}
	t.release(o, true)
	// Read for the hand-off above, the answer's lines are no longer
	// needed.
	t.sent.release()
}

// release gives back what the turn holds, once: routing hears the outcome
// when the turn was sent; the budgets are charged what it used, or given
// back the whole charge when it was never sent.
func (t *Turn) release(o affinity.Outcome, sent bool) {
	t.once.Do(func() {
		if sent && t.ep != nil {
			t.d.policy.Done(&t.route, t.ep, o)
		}
		// Quotas and fair shares are charged what the engine counted:
		// prompt plus generated tokens; -1 keeps the admission estimate.
		actual := -1
		if o.PromptTokens > 0 {
			actual = o.PromptTokens + o.CompletionTokens
		}
		t.ticket.Release(actual)
		// A turn the engine refused computed nothing: its charge goes
		// back, as a turn's that was never sent.
		t.budget.Settle(sent && (o.Err == nil || o.PromptTokens > 0), int64(actual))
		if t.touched {
			t.d.sessions.Finish(t.spec.Tenant, t.sessionKey, time.Now())
		}
		if b := t.bufs; b != nil {
			t.route.Hashes, t.tokens, t.bufs = nil, nil, nil
			if cap(b.tokens) <= maxPooledTokens {
				bufferPool.Put(b)
			}
		}
	})
}

// EngineError is an engine's refusal of a request (a 4xx), as the engine
// explained it.
type EngineError struct {
	// Status is the engine's HTTP status.
	Status int
	// Message is the engine's message, or its body when it sent no
	// OpenAI-shaped error.
	Message string
	// Code and Param are the engine's when it sent them as strings, ""
	// otherwise.
	Code, Param string
}

func (e *EngineError) Error() string {
	return fmt.Sprintf("dispatch: the engine answered %d: %s", e.Status, e.Message)
}

// readEngineError reads an engine's error answer.
func readEngineError(resp *http.Response) *EngineError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	var body struct {
		Message string `json:"message"`
		Detail  any    `json:"detail"`
		Error   *struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
			Param   any    `json:"param"`
		} `json:"error"`
	}
	json.Unmarshal(b, &body)
	e := &EngineError{Status: resp.StatusCode, Message: body.Message}
	if body.Error != nil {
		e.Message = body.Error.Message
		e.Code, _ = body.Error.Code.(string)
		e.Param, _ = body.Error.Param.(string)
	}
	if e.Message == "" {
		if s, ok := body.Detail.(string); ok {
			e.Message = s
		}
	}
	if e.Message == "" {
		e.Message = string(bytes.TrimSpace(b))
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// ContextLength reports whether the engine refused the prompt as longer
// than the model's context window.
func (e *EngineError) ContextLength() bool {
	if e.Code == "context_length_exceeded" {
		return true
	}
	lower := bytes.ToLower([]byte(e.Message))
	return e.Status == http.StatusBadRequest && (bytes.Contains(lower, []byte("context length")) ||
		bytes.Contains(lower, []byte("max_model_len")) || bytes.Contains(lower, []byte("context window")))
}

// RateLimits is the state of the turn's budgets after it was charged, for
// the x-ratelimit-* headers; nil when no budget applies.
func (t *Turn) RateLimits() *budgets.Limits {
	if t.budget == nil {
		return nil
	}
	return t.budget.Limits()
}
