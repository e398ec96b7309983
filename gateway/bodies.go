package gateway

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// Defaults for Options.BodyBudget and Options.MaxTokenBytes.
const (
	// DefaultBodyBudget is the body budget of a process without a Go
	// memory limit: about 2,500 agent requests of 50k tokens at once.
	DefaultBodyBudget = 512 << 20 // bytes
	// DefaultMaxTokenBytes is the longest token of Qwen3's vocabulary (128
	// spaces), the longest of the tokenizers checked.
	DefaultMaxTokenBytes = 128
	// bodyBudgetShare is the share of a Go memory limit that bodies may
	// hold: a quarter. A body costs up to three times its size for the
	// moment it is read and checked, and its size or less for most of its
	// request's life.
	bodyBudgetShare = 4
)

// BodyBudgetFor is the default Options.BodyBudget under a Go memory
// limit of memoryLimit bytes (debug.SetMemoryLimit's; 0 or less for none):
// a quarter of it, else DefaultBodyBudget.
func BodyBudgetFor(memoryLimit int64) int64 {
	if memoryLimit <= 0 {
		return DefaultBodyBudget
	}
	return memoryLimit / bodyBudgetShare
}

// bodyBudget counts the bytes of the request bodies in flight, against a
// limit. It must not be copied.
type bodyBudget struct {
	limit    int64
	inFlight atomic.Int64
	// refused counts the requests refused for the budget; its metric is
	// turnpike_request_body_refusals_total{reason="budget"}.
	refused atomic.Int64
}

// take reserves n bytes, unless that would pass the limit.
func (b *bodyBudget) take(n int64) bool {
	for {
		held := b.inFlight.Load()
		if held+n > b.limit {
			return false
		}
		if b.inFlight.CompareAndSwap(held, held+n) {
			return true
		}
	}
}

func (b *bodyBudget) give(n int64) { b.inFlight.Add(-n) }

// errBodyBudget is the class of a request refused because the bodies in
// flight hold the whole budget.
var errBodyBudget = errors.New("gateway: request bodies in flight at the budget")

// bodyBudgetError is the 503 of a request over the budget: the client
// may send it again in a moment, when bodies in flight have ended.
func bodyBudgetError() *apierror.Error {
	return apierror.Unavailable("server_overloaded", "The gateway is holding as many request bodies as its memory allows. Retry after the indicated delay.").
		WithClass(errBodyBudget).
		WithHeader("Retry-After", "1").
		WithHeader("X-Turnpike-Dropped-Reason", "body-budget")
}

// limitBodies bounds each request's body by the body limit (413) and
// holds it against the budget from before it is read until the handler
// returns: the length it states, taken at once, so that a request over
// the budget is refused with a 503 before a byte of its body is read; or,
// for a body of unknown length, each chunk as it is read, the request
// failing with the limit's 413 or the budget's 503 at the chunk that
// passes either. One middleware, not two: Echo builds each request's
// chain anew, a closure a middleware.
func (s *Server) limitBodies(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		switch n := r.ContentLength; {
		case n == 0 || r.Body == nil || r.Body == http.NoBody:
			return next(c)
		case n > s.opts.BodyLimit:
			return echo.ErrStatusRequestEntityTooLarge
		case n > 0:
			// net/http reads no further than the length stated.
			if !s.bodies.take(n) {
				s.bodies.refused.Add(1)
				return bodyBudgetError()
			}
			defer s.bodies.give(n)
			return next(c)
		}
		body := &heldBody{ReadCloser: r.Body, budget: &s.bodies, limit: s.opts.BodyLimit}
		r.Body = body
		defer body.giveBack()
		return next(c)
	}
}

// heldBody reads a body of unknown length, failing past the body limit,
// and takes what it reads from the budget. The request's goroutine alone
// reads it.
type heldBody struct {
	io.ReadCloser
	budget *bodyBudget
	limit  int64
	// held is what was read and taken from the budget.
	held int64
	// err ends the body: it passed the limit or the budget.
	err error
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case n == 0:
	case b.held+int64(n) > b.limit:
		b.err = echo.ErrStatusRequestEntityTooLarge
	case !b.budget.take(int64(n)):
		b.budget.refused.Add(1)
		b.err = bodyBudgetError()
	default:
		b.held += int64(n)
		return n, err
	}
	if b.err != nil {
		return 0, b.err
	}
	return n, err
}

// giveBack returns what the body took, once its request has ended.
func (b *heldBody) giveBack() { b.budget.give(b.held) }

// refuseOverContext refuses, before it is decoded, a body whose text
// alone proves the prompt longer than its model's context window: more
// bytes of text than the window has tokens times the most bytes a token
// holds. It is a 400 context_length_exceeded on param, as the engine or
// the Responses context would have answered after decoding it; nil lets
// the body through.
//
// The most bytes a token holds is Options.MaxTokenBytes, for any
// tokenizer; for a Responses body of a model counted with prompt.Approx,
// which the gateway's own count then refuses past the window, the
// approximation's four.
func (s *Server) refuseOverContext(body []byte, kind prompt.BodyKind, param string) error {
	if s.opts.MaxTokenBytes < 0 || int64(len(body)) <= s.contextFloor[kind] {
		// Too short to pass the smallest window: not worth a scan.
		return nil
	}
	b, ok := prompt.TextBound(body, kind)
	if !ok {
		return nil
	}
	window := s.dispatch.ContextLength(b.Model)
	if window <= 0 {
		return nil
	}
	perToken := s.tokenBytes(kind, b.Model)
	if b.Text <= window*perToken {
		return nil
	}
	s.overContext.Add(1)
	return invalid(param, "context_length_exceeded",
		"This model's maximum context length is %d tokens. However, the text of your %s alone is %d bytes, more than %d tokens of at most %d bytes each. Please reduce the length of the %s.",
		window, param, b.Text, window, perToken, param)
}

// tokenBytes is the most bytes of text one token of model holds, as far
// as a body of kind is concerned.
func (s *Server) tokenBytes(kind prompt.BodyKind, model string) int {
	if kind == prompt.ResponsesBody {
		if _, ok := s.dispatch.Tokenizer(model).(prompt.Approx); ok {
			return prompt.ApproxBytesPerToken
		}
	}
	return s.opts.MaxTokenBytes
}

// contextFloors is, for each body kind, the length under which no body
// can pass any served model's window by refuseOverContext's rule: a body
// is never shorter than its text.
func (s *Server) contextFloors() (floors [bodyKinds]int64) {
	for _, kind := range []prompt.BodyKind{prompt.ChatBody, prompt.CompletionBody, prompt.ResponsesBody} {
		floors[kind] = 1<<63 - 1 // no window known: nothing is refused
		for _, m := range s.reg.Models() {
			if window := s.dispatch.ContextLength(m); window > 0 {
				floors[kind] = min(floors[kind], int64(window)*int64(s.tokenBytes(kind, m)))
			}
		}
	}
	return floors
}

// bodyKinds sizes arrays indexed by prompt.BodyKind.
const bodyKinds = prompt.ResponsesBody + 1

var (
	bodyBytesDesc = prometheus.NewDesc("turnpike_request_body_bytes_in_flight",
		"Bytes of request bodies held by requests being handled: the length a body states, from before it is read, else what was read of it.", nil, nil)
	bodyBudgetDesc = prometheus.NewDesc("turnpike_request_body_budget_bytes",
		"The most bytes of request bodies held at once (bodyBudget); a request past it is refused with a 503.", nil, nil)
	bodyStagesDesc = prometheus.NewDesc("turnpike_request_body_stage_bytes",
		"Bytes of the buffers outside the Go heap that long bodies are checked in before they are decoded, in use or kept for reuse.", nil, nil)
	bodyRefusalsDesc = prometheus.NewDesc("turnpike_request_body_refusals_total",
		"Requests refused for their body before it was decoded, by reason: budget (503: the bodies in flight held the budget) or context_length (400: the body's text alone is longer than its model's context window).", []string{"reason"}, nil)
)

// bodyCollector reads the body budget's counters at scrape time.
type bodyCollector struct{ s *Server }

func (c bodyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- bodyBytesDesc
	ch <- bodyBudgetDesc
	ch <- bodyStagesDesc
	ch <- bodyRefusalsDesc
}

func (c bodyCollector) Collect(ch chan<- prometheus.Metric) {
	b := &c.s.bodies
	ch <- prometheus.MustNewConstMetric(bodyBytesDesc, prometheus.GaugeValue, float64(b.inFlight.Load()))
	ch <- prometheus.MustNewConstMetric(bodyBudgetDesc, prometheus.GaugeValue, float64(b.limit))
	ch <- prometheus.MustNewConstMetric(bodyStagesDesc, prometheus.GaugeValue, float64(c.s.stages.mapped.Load()))
	ch <- prometheus.MustNewConstMetric(bodyRefusalsDesc, prometheus.CounterValue, float64(b.refused.Load()), "budget")
	ch <- prometheus.MustNewConstMetric(bodyRefusalsDesc, prometheus.CounterValue, float64(c.s.overContext.Load()), "context_length")
}

// Interface guards.
var _ prometheus.Collector = bodyCollector{}
