package responses

import (
	"context"
	"net/http"
	"time"

	"github.com/turnpike-gateway/turnpike/kv"
)

// EngineRequest is one chat completion the responses layer needs from the
// fleet: the rebuilt conversation, rendered as an OpenAI chat request.
type EngineRequest struct {
	// Model is the served model name.
	Model string
	// Body is the chat completions request JSON (stream true, usage on).
	Body []byte
	// Prompt is Body as the KV index hashes it: kv.AppendRender(Prompt)
	// is the engine's chat template applied to Body. It is built with Body,
	// so routing need not parse Body again. Shared: do not modify it.
	Prompt *kv.Prompt
	// Tenant owns the response.
	Tenant string
	// SessionKey names the conversation for routing: the conversation id,
	// or the root of the previous_response_id chain.
	SessionKey string
	// PromptTokens is the estimated prompt length; MaxOutputTokens the
	// output budget (0 if unbounded).
	PromptTokens, MaxOutputTokens int
	// ServiceTier is the request's service_tier ("priority", "flex", …),
	// a hint for flow control; "" if unset.
	ServiceTier string
	// Background is set for a background response.
	Background bool
	// Header carries routing hints from the client request (priority,
	// session headers); may be nil.
	Header http.Header
}

// Engine sends chat completions to the fleet. The gateway implements it
// with routing, breakers and retries; tests may use a real simulated
// engine behind it.
type Engine interface {
	// ChatCompletion sends r and returns the engine's response once its
	// headers arrive. A 200 body is an SSE stream of chat.completion.chunk
	// events; a 4xx carries the engine's OpenAI-shaped error. The caller
	// closes the body.
	//
	// An error with a RetryAfter() time.Duration method (see retryable)
	// says "try again later": a background response waits and tries again
	// instead of failing.
	ChatCompletion(ctx context.Context, r *EngineRequest) (*http.Response, error)
	// ContextLength is the model's context window in tokens, 0 if unknown.
	ContextLength(model string) int
}

// retryable is an engine error that says "try again later": flow control
// shed the turn under load (background turns first), or refused it while
// the gateway shuts down. RetryAfter is when trying again may succeed; 0
// or less means no hint. A background response waits that long (bounded)
// and tries again; a foreground one returns the error to its client.
type retryable interface {
	RetryAfter() time.Duration
}

// statusCoder is an engine error that carries the HTTP status a client
// would be answered with: for a refusal, 429 (the tenant's own limits) or
// 503 (overload). It names why a background response that was refused
// until it gave up failed.
type statusCoder interface {
	HTTPStatus() int
}
