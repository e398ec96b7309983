package prompt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Request is what the turn path reads of a client's chat or text
// completion body: enough to admit, count, route and forward it. The body
// itself is forwarded as the client wrote it.
type Request struct {
	// Model is the model asked for.
	Model string
	// Stream asks for a streamed answer.
	Stream bool
	// MaxTokens and MaxCompletionTokens are the output budgets the body
	// gives, nil when absent.
	MaxTokens, MaxCompletionTokens *int
	// HasStreamOptions: the body has a stream_options object (not null);
	// IncludeUsage is its include_usage.
	HasStreamOptions, IncludeUsage bool
	// PromptCacheKey and ServiceTier are the body's, "" when absent.
	PromptCacheKey, ServiceTier string
	// Prompt is the request as the engine's chat template sees it: Model,
	// Tools and Messages for a chat, Text for a text completion (a prompt
	// given as several strings is their concatenation).
	Prompt Prompt
	// TokenIDs is a text completion's prompt given as token ids; nil
	// otherwise.
	TokenIDs []uint32
}

// MaxOutputTokens is the request's output budget: max_completion_tokens,
// else max_tokens, else 0 (unbounded).
func (r *Request) MaxOutputTokens() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return 0
}

// FieldError is a request the parser refuses, in the terms of an OpenAI
// invalid_request_error: the offending parameter ("" for the body as a
// whole), a code and a message for the client.
type FieldError struct {
	Param, Code, Message string
}

func (e *FieldError) Error() string { return "prompt: " + e.Message }

func fieldError(param, code, format string, args ...any) *FieldError {
	return &FieldError{Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// ParseChat reads a /v1/chat/completions body in one pass. It refuses a
// body that is not a JSON object, lacks model or messages, or gives a
// field of the wrong type, with a *FieldError.
func ParseChat(body []byte) (*Request, error) { return parseRequest(body, true) }

// ParseCompletion reads a /v1/completions body in one pass, like ParseChat.
func ParseCompletion(body []byte) (*Request, error) { return parseRequest(body, false) }

// wireRequest is the body as encoding/json reads it.
type wireRequest struct {
	Model               *string         `json:"model"`
	Stream              *bool           `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	PromptCacheKey      *string         `json:"prompt_cache_key"`
	ServiceTier         *string         `json:"service_tier"`
	Tools               json.RawMessage `json:"tools"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func parseRequest(body []byte, chat bool) (*Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, decodeError(err, "")
	}
	r := &Request{MaxTokens: w.MaxTokens, MaxCompletionTokens: w.MaxCompletionTokens}
	if w.Model == nil || *w.Model == "" {
		return nil, fieldError("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	r.Model, r.Prompt.Model = *w.Model, *w.Model
	r.Stream = w.Stream != nil && *w.Stream
	if w.StreamOptions != nil {
		r.HasStreamOptions = true
		r.IncludeUsage = w.StreamOptions.IncludeUsage != nil && *w.StreamOptions.IncludeUsage
	}
	if w.PromptCacheKey != nil {
		r.PromptCacheKey = *w.PromptCacheKey
	}
	if w.ServiceTier != nil {
		r.ServiceTier = *w.ServiceTier
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", r.MaxTokens}, {"max_completion_tokens", r.MaxCompletionTokens}} {
		if p.v != nil && *p.v < 1 {
			return nil, fieldError(p.name, "integer_below_min_value", "Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", p.name, *p.v)
		}
	}
	if !isNull(w.Tools) {
		r.Prompt.Tools = w.Tools
	}
	if chat {
		return r, parseMessages(r, w.Messages)
	}
	return r, parsePrompt(r, w.Prompt)
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || bytes.Equal(raw, []byte("null")) }

func parseMessages(r *Request, raw json.RawMessage) error {
	if isNull(raw) {
		return fieldError("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	}
	var msgs []wireMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return decodeError(err, "messages.")
		}
		return fieldError("messages", "invalid_type", "Invalid type for 'messages': expected an array of message objects.")
	}
	if len(msgs) == 0 {
		return fieldError("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1.")
	}
	r.Prompt.Messages = make([]Message, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		text, err := contentText(m.Content)
		if err != nil {
			return fieldError(fmt.Sprintf("messages[%d].content", i), "invalid_type", "Invalid type for 'messages[%d].content': expected a string or an array of content parts.", i)
		}
		pm := Message{Role: m.Role, Content: text}
		for _, tc := range m.ToolCalls {
			pm.ToolCalls = append(pm.ToolCalls, ToolCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		r.Prompt.Messages[i] = pm
	}
	return nil
}

// contentText is a message's text: the string, or its text parts joined.
func contentText(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, part := range parts {
		b.WriteString(part.Text)
	}
	return b.String(), nil
}

// parsePrompt reads a text completion's prompt: a string, strings, or
// token ids.
func parsePrompt(r *Request, raw json.RawMessage) error {
	if isNull(raw) {
		return fieldError("prompt", "missing_required_parameter", "Missing required parameter: 'prompt'.")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		r.Prompt.Text = text
		return nil
	}
	var texts []string
	if json.Unmarshal(raw, &texts) == nil {
		r.Prompt.Text = strings.Join(texts, "")
		return nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		r.TokenIDs = ids
		if r.TokenIDs == nil {
			r.TokenIDs = []uint32{}
		}
		return nil
	}
	var batches [][]uint32
	if json.Unmarshal(raw, &batches) == nil {
		r.TokenIDs = []uint32{}
		for _, b := range batches {
			r.TokenIDs = append(r.TokenIDs, b...)
		}
		return nil
	}
	return fieldError("prompt", "invalid_type", "Invalid type for 'prompt': expected a string, an array of strings or an array of token ids.")
}

// decodeError turns a json error into a FieldError that says what was
// wrong where; prefix goes before the field's path.
func decodeError(err error, prefix string) *FieldError {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field != "" {
			field = prefix + field
		}
		return fieldError(field, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", field, jsonKind(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return fieldError("", "invalid_json", "We could not parse the JSON body of your request: %s at offset %d.", se.Error(), se.Offset)
	}
	return fieldError("", "invalid_json", "We could not parse the JSON body of your request: %s.", err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string", "ptr":
		return "a string"
	case "int", "int64", "int32", "uint32", "float64", "float32":
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
