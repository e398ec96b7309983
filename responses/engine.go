package responses

import (
	"context"
	"net/http"
)

// EngineRequest is one chat completion the responses layer needs from the
// fleet: the rebuilt conversation, rendered as an OpenAI chat request.
type EngineRequest struct {
	// Model is the served model name.
	Model string
	// Body is the chat completions request JSON (stream true, usage on).
	Body []byte
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
	ChatCompletion(ctx context.Context, r *EngineRequest) (*http.Response, error)
	// ContextLength is the model's context window in tokens, 0 if unknown.
	ContextLength(model string) int
}
