package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ChatMessage is one message of a chat completion request, as the
// OpenAI API and vLLM accept it.
type ChatMessage struct {
	Role    string         `json:"role"`
	Content MessageContent `json:"content"`
	Name    string         `json:"name,omitempty"`
	// ToolCalls are an assistant message's calls.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID ties a "tool" message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// MessageContent is a message's content: a string, an array of content
// parts, or null. It keeps the text; non-text parts (images) are dropped.
type MessageContent struct {
	text string
}

// Text is the string content, or the concatenated text of the parts.
func (c MessageContent) Text() string { return c.text }

// TextContent makes string content.
func TextContent(s string) MessageContent { return MessageContent{text: s} }

// UnmarshalJSON accepts a string, null, or an array of content parts.
func (c *MessageContent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*c = MessageContent{}
		return nil
	case b[0] == '"':
		// encoding/json has checked b: a string with no escapes and only
		// UTF-8 is its own text, so it need not be read again. (The other
		// checks keep a direct call with anything else on the slow path.
		// The gateway's prompt.String does this and more, but the
		// simulator imports nothing of the gateway's.)
		if n := len(b); n >= 2 && b[n-1] == '"' {
			if t := b[1 : n-1]; bytes.IndexByte(t, '\\') < 0 && bytes.IndexByte(t, '"') < 0 && utf8.Valid(t) {
				*c = MessageContent{text: string(t)}
				return nil
			}
		}
		*c = MessageContent{}
		return json.Unmarshal(b, &c.text)
	case b[0] == '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var s []byte
		for _, p := range parts {
			s = append(s, p.Text...)
		}
		*c = MessageContent{text: string(s)}
		return nil
	}
	return errors.New("content must be a string, an array of content parts or null")
}

// MarshalJSON writes string content (parts come back joined as a string).
func (c MessageContent) MarshalJSON() ([]byte, error) { return json.Marshal(c.text) }

// ToolCall is an assistant's call of a function tool.
type ToolCall struct {
	// Index is set only in streamed deltas.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON arguments string.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// StreamOptions is the OpenAI stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatCompletionRequest is the body of POST /v1/chat/completions. Fields
// the simulator does not model (sampling parameters) are accepted and
// ignored.
type ChatCompletionRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Tools               json.RawMessage `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	// IgnoreEOS is vLLM's extension: generate exactly the maximum tokens.
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
	N         *int `json:"n,omitempty"`
	// Priority is vLLM's extension: under the priority scheduling policy,
	// lower values are served first. Default 0.
	Priority int `json:"priority,omitempty"`
	// KVTransferParams disaggregates prefill and decode (see
	// KVTransferParams).
	KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
	// BootstrapFields disaggregate prefill and decode as SGLang does (see
	// Bootstrap).
	BootstrapFields
	// ContinueFinalMessage and AddGenerationPrompt are vLLM's chat
	// template switches: continue_final_message renders the final
	// (assistant) message open, so the answer continues its text in
	// place; add_generation_prompt false leaves the generation prompt out.
	ContinueFinalMessage bool  `json:"continue_final_message,omitempty"`
	AddGenerationPrompt  *bool `json:"add_generation_prompt,omitempty"`
	// ResponseFormat is {"type":"text"}, {"type":"json_object"} or
	// {"type":"json_schema","json_schema":{"name","schema","strict"}}.
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`

	// format is ResponseFormat as DecodeChatRequest parsed it: nil for
	// text answers.
	format *responseFormat
}

// CompletionRequest is the body of POST /v1/completions. Prompt is a
// string or an array holding one string.
type CompletionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens     *int            `json:"max_tokens,omitempty"`
	IgnoreEOS     bool            `json:"ignore_eos,omitempty"`
	// Priority is as ChatCompletionRequest's.
	Priority int  `json:"priority,omitempty"`
	N        *int `json:"n,omitempty"`
	// KVTransferParams disaggregates prefill and decode (see
	// KVTransferParams).
	KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
	// BootstrapFields disaggregate prefill and decode as SGLang does (see
	// Bootstrap).
	BootstrapFields
}

// TokenizeRequest is the body of vLLM's POST /tokenize: either Prompt or
// Messages (with optional Tools) is set.
type TokenizeRequest struct {
	Model    string          `json:"model"`
	Prompt   *string         `json:"prompt,omitempty"`
	Messages []ChatMessage   `json:"messages,omitempty"`
	Tools    json.RawMessage `json:"tools,omitempty"`
	// AddGenerationPrompt ends a chat in the generation prompt; nil
	// means true, as vLLM's default.
	AddGenerationPrompt *bool `json:"add_generation_prompt,omitempty"`
}

// TokenizeResponse is vLLM's /tokenize answer.
type TokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
}

// DecodeChatRequest parses a chat completion body and checks the parts
// the simulator relies on.
func DecodeChatRequest(body []byte) (*ChatCompletionRequest, error) {
	var req ChatCompletionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %w", err)
	}
	if len(req.Messages) == 0 {
		return nil, &paramError{param: "messages", msg: "messages must be a non-empty array"}
	}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, &paramError{param: "messages", msg: fmt.Sprintf("messages[%d]: unknown role %q", i, m.Role)}
		}
	}
	if req.N != nil && *req.N != 1 {
		return nil, &paramError{param: "n", msg: "only n=1 is supported"}
	}
	if req.ContinueFinalMessage {
		if req.Messages[len(req.Messages)-1].Role != "assistant" {
			return nil, &paramError{param: "messages", msg: "continue_final_message needs a final assistant message"}
		}
		if req.AddGenerationPrompt == nil || *req.AddGenerationPrompt {
			return nil, &paramError{param: "add_generation_prompt", msg: "continue_final_message and add_generation_prompt cannot both be true"}
		}
	}
	if _, err := parseToolChoice(req.ToolChoice); err != nil {
		return nil, err
	}
	format, err := parseResponseFormat(req.ResponseFormat)
	if err != nil {
		return nil, err
	}
	req.format = format
	return &req, nil
}

// DecodeCompletionRequest parses a completion body and returns its prompt.
func DecodeCompletionRequest(body []byte) (*CompletionRequest, string, error) {
	var req CompletionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, "", fmt.Errorf("invalid JSON body: %w", err)
	}
	if req.N != nil && *req.N != 1 {
		return nil, "", &paramError{param: "n", msg: "only n=1 is supported"}
	}
	var prompt string
	if err := json.Unmarshal(req.Prompt, &prompt); err != nil {
		var prompts []string
		if err := json.Unmarshal(req.Prompt, &prompts); err != nil || len(prompts) != 1 {
			return nil, "", &paramError{param: "prompt", msg: "prompt must be a string or an array of one string"}
		}
		prompt = prompts[0]
	}
	return &req, prompt, nil
}

// paramError is a 400 about one request parameter.
type paramError struct {
	param, msg string
}

func (e *paramError) Error() string { return e.msg }

// toolChoice is the parsed tool_choice.
type toolChoice struct {
	mode string // "auto", "none", "required" or "function"
	name string // for "function"
}

func parseToolChoice(raw json.RawMessage) (toolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return toolChoice{mode: "auto"}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return toolChoice{mode: s}, nil
		}
		return toolChoice{}, &paramError{param: "tool_choice", msg: fmt.Sprintf("invalid tool_choice %q", s)}
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Function.Name == "" {
		return toolChoice{}, &paramError{param: "tool_choice", msg: "tool_choice must be a string or {\"type\":\"function\",\"function\":{\"name\":...}}"}
	}
	return toolChoice{mode: "function", name: named.Function.Name}, nil
}

// responseFormat is a response_format that asks for JSON. schema is the
// JSON schema the answer satisfies, as decodeSchema decodes it (a
// jsonObject or a bool), or nil for json_object: any JSON object.
type responseFormat struct {
	schema any
}

// parseResponseFormat reads response_format as vLLM accepts it; nil for
// text.
func parseResponseFormat(raw json.RawMessage) (*responseFormat, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	bad := func(msg string) error { return &paramError{param: "response_format", msg: msg} }
	var f struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   *string         `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, bad("response_format must be an object with a type: " + err.Error())
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &responseFormat{}, nil
	case "json_schema":
	default:
		return nil, bad(fmt.Sprintf("response_format type %q is not text, json_object or json_schema", f.Type))
	}
	if f.JSONSchema == nil || f.JSONSchema.Name == nil {
		return nil, bad("response_format of type json_schema needs json_schema with a name")
	}
	s := bytes.TrimSpace(f.JSONSchema.Schema)
	if len(s) == 0 || string(s) == "null" {
		return &responseFormat{}, nil
	}
	schema, err := decodeSchema(s)
	if err != nil {
		return nil, bad("response_format json_schema.schema: " + err.Error())
	}
	switch schema.(type) {
	case jsonObject, bool:
	default:
		return nil, bad("response_format json_schema.schema must be a JSON schema object")
	}
	return &responseFormat{schema: schema}, nil
}

// Response shapes, as vLLM writes them.

type usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details"`
	// CompletionTokensDetails is set by reasoning models only.
	CompletionTokensDetails *completionTokensDetails `json:"completion_tokens_details,omitempty"`
}

type completionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
	// KVTransferParams answers a prefill for a remote decoder.
	KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
}

type chatChoice struct {
	Index        int          `json:"index"`
	Message      *chatMessage `json:"message,omitempty"`
	Delta        *chatMessage `json:"delta,omitempty"`
	Logprobs     *struct{}    `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
}

// chatMessage is an answer message or delta; Content is a pointer so a
// tool-call answer says null and a delta can omit it. ReasoningContent is
// a reasoning model's thoughts, vLLM's field.
type chatMessage struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

type textCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []textChoice `json:"choices"`
	Usage   *usage       `json:"usage,omitempty"`
	// KVTransferParams answers a prefill for a remote decoder.
	KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
}

type textChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen int     `json:"max_model_len"`
}

// errorBody is the OpenAI error shape. Code is the HTTP status, as vLLM
// writes it.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	} `json:"error"`
}
