package prompt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The reference parser: encoding/json with a narrow struct, the way the
// gateway read bodies before the one-pass decoder. The fuzz targets hold
// ParseChat and ParseCompletion to it. It matches object keys without
// regard to case, as encoding/json does; the one-pass decoder matches them
// exactly, as engines do, so the fuzz targets leave out bodies in which a
// key differs from a field name only in case (see foldedKey).

// wireRequestRef is the body as encoding/json reads it.
type wireRequestRef struct {
	Model               *string         `json:"model"`
	Stream              *bool           `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	PromptCacheKey      *string         `json:"prompt_cache_key"`
	ServiceTier         *string         `json:"service_tier"`
	SafetyIdentifier    *string         `json:"safety_identifier"`
	Tools               json.RawMessage `json:"tools"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessageRef struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func parseRequestRef(body []byte, chat bool) (*Request, error) {
	var w wireRequestRef
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, decodeErrorRef(err, "")
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
	if w.SafetyIdentifier != nil {
		r.SafetyIdentifier = *w.SafetyIdentifier
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", r.MaxTokens}, {"max_completion_tokens", r.MaxCompletionTokens}} {
		if p.v != nil && *p.v < 1 {
			return nil, fieldError(p.name, "integer_below_min_value", "Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", p.name, *p.v)
		}
	}
	if !isNullRef(w.Tools) {
		r.Prompt.Tools = w.Tools
	}
	if chat {
		return r, parseMessagesRef(r, w.Messages)
	}
	return r, parsePromptRef(r, w.Prompt)
}

func isNullRef(raw json.RawMessage) bool { return len(raw) == 0 || bytes.Equal(raw, []byte("null")) }

func parseMessagesRef(r *Request, raw json.RawMessage) error {
	if isNullRef(raw) {
		return fieldError("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	}
	var msgs []wireMessageRef
	if err := json.Unmarshal(raw, &msgs); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return decodeErrorRef(err, "messages.")
		}
		return fieldError("messages", "invalid_type", "Invalid type for 'messages': expected an array of message objects.")
	}
	if len(msgs) == 0 {
		return fieldError("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1.")
	}
	r.Prompt.Messages = make([]Message, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		text, err := contentTextRef(m.Content)
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

// contentTextRef is a message's text: the string, or its text parts joined.
func contentTextRef(raw json.RawMessage) (string, error) {
	if isNullRef(raw) {
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

// parsePromptRef reads a text completion's prompt: a string, strings, or
// token ids.
func parsePromptRef(r *Request, raw json.RawMessage) error {
	if isNullRef(raw) {
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

// decodeErrorRef turns a json error into a FieldError that says what was
// wrong where; prefix goes before the field's path.
func decodeErrorRef(err error, prefix string) *FieldError {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field != "" {
			field = prefix + field
		}
		return fieldError(field, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", field, jsonKindRef(te.Type.Kind().String()), te.Value)
	case errors.As(err, &se):
		return fieldError("", "invalid_json", "We could not parse the JSON body of your request: %s at offset %d.", se.Error(), se.Offset)
	}
	return fieldError("", "invalid_json", "We could not parse the JSON body of your request: %s.", err.Error())
}

func jsonKindRef(goKind string) string {
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
