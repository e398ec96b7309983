package enginetok

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// ErrEngine is wrapped by every error of asking the engine: unreachable,
// too slow, an error status or an answer that is not a tokenization.
var ErrEngine = errors.New("enginetok: engine tokenization failed")

// DefaultTimeout bounds one tokenization request when Client.Timeout is 0.
const DefaultTimeout = 2 * time.Second

// maxResponse bounds the body of a tokenization answer read: 4 bytes or
// so a token, for far more tokens than any context window.
const maxResponse = 64 << 20

// Client asks one engine to tokenize.
type Client struct {
	// BaseURL is the engine's address, such as http://10.0.0.7:8000,
	// without /v1; /tokenize is appended. Required.
	BaseURL string
	// Model is the model name sent with each request. Required.
	Model string
	// HTTPClient sends the requests; nil means http.DefaultClient.
	HTTPClient *http.Client
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// Fallback tokenizes for Encode and Count when the engine fails; nil
	// means prompt.Approx.
	Fallback prompt.Tokenizer

	failures atomic.Uint64
}

type tokenizeRequest struct {
	Model               string          `json:"model"`
	Prompt              *string         `json:"prompt,omitempty"`
	Messages            []chatMessage   `json:"messages,omitempty"`
	Tools               json.RawMessage `json:"tools,omitempty"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt,omitempty"`
	AddSpecialTokens    bool            `json:"add_special_tokens"`
}

type chatMessage struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type tokenizeResponse struct {
	Tokens []uint32 `json:"tokens"`
	Count  *int     `json:"count"`
}

// Tokenize returns the engine's ids of text, with no special tokens added
// (add_special_tokens false): text is taken to be a rendered prompt.
func (c *Client) Tokenize(ctx context.Context, text string) ([]uint32, error) {
	return c.do(ctx, &tokenizeRequest{Model: c.Model, Prompt: &text})
}

// TokenizeChat returns the ids of msgs and tools (the raw JSON of the
// request's tools array, or nil) as the engine's chat template renders
// them, the generation prompt included when addGenerationPrompt is set.
// Tool calls get ids call_0, call_1, … and each tool message the id of the
// earliest call not yet answered, since templates may refer to them.
func (c *Client) TokenizeChat(ctx context.Context, msgs []prompt.Message, tools []byte, addGenerationPrompt bool) ([]uint32, error) {
	req := &tokenizeRequest{Model: c.Model, Messages: make([]chatMessage, len(msgs)), AddGenerationPrompt: &addGenerationPrompt}
	if len(bytes.TrimSpace(tools)) > 0 {
		if !json.Valid(tools) {
			return nil, fmt.Errorf("%w: tools are not valid JSON", ErrEngine)
		}
		req.Tools = tools
	}
	var next, answered int
	for i, m := range msgs {
		cm := chatMessage{Role: m.Role, Content: m.Content}
		if m.Role == "assistant" {
			for _, tc := range m.ToolCalls {
				var t toolCall
				t.ID, t.Type = fmt.Sprintf("call_%d", next), "function"
				t.Function.Name, t.Function.Arguments = tc.Name, tc.Arguments
				cm.ToolCalls = append(cm.ToolCalls, t)
				next++
			}
		}
		if m.Role == "tool" {
			cm.ToolCallID = fmt.Sprintf("call_%d", min(answered, max(next-1, 0)))
			answered++
		}
		req.Messages[i] = cm
	}
	return c.do(ctx, req)
}

func (c *Client) do(ctx context.Context, req *tokenizeRequest) ([]uint32, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := strings.TrimSuffix(c.BaseURL, "/") + "/tokenize"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrEngine, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("%w: POST %s: %v", ErrEngine, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("%w: POST %s: reading the answer: %v", ErrEngine, url, err)
	}
	return parseAnswer(url, resp.Status, resp.StatusCode, data)
}

// parseAnswer reads the engine's answer: its ids, or the error it tells.
func parseAnswer(url, status string, code int, data []byte) ([]uint32, error) {
	if code != http.StatusOK {
		return nil, fmt.Errorf("%w: POST %s: %s: %s", ErrEngine, url, status, errorMessage(data))
	}
	if len(data) > maxResponse {
		return nil, fmt.Errorf("%w: POST %s: answer over %d bytes", ErrEngine, url, maxResponse)
	}
	var out tokenizeResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("%w: POST %s: answer is not a tokenization: %v", ErrEngine, url, err)
	}
	if out.Tokens == nil {
		return nil, fmt.Errorf("%w: POST %s: answer has no tokens", ErrEngine, url)
	}
	if out.Count != nil && *out.Count != len(out.Tokens) {
		return nil, fmt.Errorf("%w: POST %s: count %d for %d tokens", ErrEngine, url, *out.Count, len(out.Tokens))
	}
	return out.Tokens, nil
}

// errorMessage is the message of an OpenAI-shaped error body, or the
// start of the body.
func errorMessage(data []byte) string {
	var e struct {
		Message string `json:"message"`
		Error   *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil {
		if e.Error != nil && e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		s = "empty body"
	}
	return s
}

func (c *Client) fallback() prompt.Tokenizer {
	if c.Fallback != nil {
		return c.Fallback
	}
	return prompt.Approx{}
}

// Encode implements prompt.Tokenizer: the engine's ids of text, or the
// Fallback's when the engine fails.
func (c *Client) Encode(dst []uint32, text string) []uint32 {
	ids, err := c.Tokenize(context.Background(), text)
	if err != nil {
		c.failures.Add(1)
		return c.fallback().Encode(dst, text)
	}
	return append(dst, ids...)
}

// Count implements prompt.Tokenizer.
func (c *Client) Count(text string) int {
	ids, err := c.Tokenize(context.Background(), text)
	if err != nil {
		c.failures.Add(1)
		return c.fallback().Count(text)
	}
	return len(ids)
}

// EncodePrompt implements prompt.PromptTokenizer: the engine renders a
// chat prompt through its own chat template, with the generation prompt,
// and tokenizes it; a completion's text is tokenized as is. When the
// engine fails, the Fallback encodes p (prompt.Encode). key is not used:
// every prompt is one request.
func (c *Client) EncodePrompt(dst []uint32, p *prompt.Prompt, key string) []uint32 {
	ids, err := c.tokenizePrompt(p)
	if err != nil {
		c.failures.Add(1)
		return prompt.Encode(c.fallback(), dst, p)
	}
	return append(dst, ids...)
}

// CountPrompt implements prompt.PromptTokenizer.
func (c *Client) CountPrompt(p *prompt.Prompt) int {
	ids, err := c.tokenizePrompt(p)
	if err != nil {
		c.failures.Add(1)
		return prompt.Count(c.fallback(), p)
	}
	return len(ids)
}

func (c *Client) tokenizePrompt(p *prompt.Prompt) ([]uint32, error) {
	if p.Messages == nil {
		return c.Tokenize(context.Background(), p.Text)
	}
	return c.TokenizeChat(context.Background(), p.Messages, p.Tools, true)
}

// Failures counts the Encode, Count, EncodePrompt and CountPrompt calls
// the Fallback answered.
func (c *Client) Failures() uint64 { return c.failures.Load() }

// Interface guards.
var _ prompt.PromptTokenizer = (*Client)(nil)
