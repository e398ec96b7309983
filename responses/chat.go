package responses

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// chatMessage is one OpenAI chat message as engines take it.
type chatMessage struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
	// ReasoningContent is an assistant turn's thinking, as vLLM takes it
	// back in a reasoning model's history.
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID       string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string           `json:"type"`
	Function chatToolFunction `json:"function"`
}

type chatToolFunction struct {
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

type chatStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatRequest is the chat completions body sent to an engine.
type chatRequest struct {
	Model             string            `json:"model"`
	Messages          []chatMessage     `json:"messages"`
	Stream            bool              `json:"stream"`
	StreamOptions     chatStreamOptions `json:"stream_options"`
	MaxTokens         *int              `json:"max_tokens,omitempty"`
	Temperature       *float64          `json:"temperature,omitempty"`
	TopP              *float64          `json:"top_p,omitempty"`
	Tools             []chatTool        `json:"tools,omitempty"`
	ToolChoice        json.RawMessage   `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls,omitempty"`
	ResponseFormat    json.RawMessage   `json:"response_format,omitempty"`
	ReasoningEffort   string            `json:"reasoning_effort,omitempty"`
	User              string            `json:"user,omitempty"`
	SafetyIdentifier  string            `json:"safety_identifier,omitempty"`
	PromptCacheKey    string            `json:"prompt_cache_key,omitempty"`
}

// renderChat turns a request and its whole context (earlier items, then
// the request's own input) into the engine's chat request body, and the
// same conversation as the prompt routing counts and hashes:
// prompt.AppendRender of it is what the engine's chat template makes of the
// body.
func renderChat(req *wire.CreateRequest, items []wire.Item) ([]byte, *prompt.Prompt, error) {
	body, p, _, err := renderChatFrom(req, items, nil, false)
	return body, p, err
}

// renderedPrefix is the start of an engine body's messages array: the
// JSON of the messages rendered from the first items of a context
// (comma-separated, no brackets), msgs of them, none of which a later
// item changes, under the instructions (a system message when system).
// buf may share its array with the body it was rendered in (held bytes in
// all): appending to it copies.
type renderedPrefix struct {
	// buf is the rendered messages, within a body of held bytes.
	buf          []byte
	held         int
	items, msgs  int
	system       bool
	instructions string
}

// renderChatFrom is renderChat with the messages of items' first
// pre.items already rendered in pre (nil: none), which it gives up; with
// keep it returns as well the prefix of this rendering for a context that
// continues items (pre grown in place).
func renderChatFrom(req *wire.CreateRequest, items []wire.Item, pre *renderedPrefix, keep bool) ([]byte, *prompt.Prompt, *renderedPrefix, error) {
	system := req.Instructions != nil && *req.Instructions != ""
	if pre != nil && (pre.items > len(items) || pre.system != system || system && pre.instructions != *req.Instructions) {
		pre = nil
	}
	msgs, markItems, markMsgs := renderMessages(req.Instructions, items)
	c := chatRequest{
		Model:             req.Model,
		Messages:          msgs,
		Stream:            true,
		StreamOptions:     chatStreamOptions{IncludeUsage: true},
		MaxTokens:         req.MaxOutputTokens,
		Temperature:       req.Temperature,
		TopP:              req.TopP,
		ParallelToolCalls: req.ParallelToolCalls,
		ResponseFormat:    responseFormat(req.Text.Format),
	}
	choice := &req.EngineChoice
	for i := range req.Tools {
		t := &req.Tools[i]
		name := t.EngineName()
		if choice.Allowed != nil && !slices.Contains(choice.Allowed, name) {
			continue
		}
		c.Tools = append(c.Tools, chatTool{Type: "function", Function: chatToolFunction{
			Name: name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
	}
	if len(c.Tools) == 0 {
		c.ParallelToolCalls = nil
	}
	c.ToolChoice = chatToolChoice(choice, len(c.Tools) > 0)
	if req.Reasoning != nil && req.Reasoning.Effort != nil {
		c.ReasoningEffort = *req.Reasoning.Effort
	}
	if req.User != nil {
		c.User = *req.User
	}
	if req.SafetyIdentifier != nil {
		c.SafetyIdentifier = *req.SafetyIdentifier
	}
	if req.PromptCacheKey != nil {
		c.PromptCacheKey = *req.PromptCacheKey
	}
	var done []byte
	if pre != nil {
		done = pre.buf[:len(pre.buf):len(pre.buf)]
	}
	body, start, end, err := chatBodyFrom(&c, done, pre.count(), markMsgs)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := chatPrompt(&c)
	if err != nil {
		return nil, nil, nil, err
	}
	if !keep {
		return body, p, nil, nil
	}
	next := &renderedPrefix{items: markItems, msgs: markMsgs, system: system}
	if system {
		next.instructions = *req.Instructions
	}
	if markMsgs < pre.count() {
		return body, p, pre, nil
	}
	// The prefix is the body's own bytes, not a copy: a body is never
	// written once rendered, and a turn in flight holds its body anyway.
	// The cached context then holds the whole body (held).
	next.buf, next.held = body[start:end:end], cap(body)
	return body, p, next, nil
}

// count is the number of messages p holds; 0 for nil.
func (p *renderedPrefix) count() int {
	if p == nil {
		return 0
	}
	return p.msgs
}

// chatBodyFrom is json.Marshal(c), its messages (the bulk of a long
// conversation) written straight into a buffer of their size:
// json.Marshal grows its buffer by doubling and then copies it out,
// three times the body in all. The first done messages are already
// written in prefix (comma-separated), which is copied, not encoded
// again. It returns as well where the messages start in the body and
// where message mark-1 ends.
func chatBodyFrom(c *chatRequest, prefix []byte, done, mark int) (b []byte, start, end int, err error) {
	msgs := c.Messages
	c.Messages = nil
	head, err := json.Marshal(c)
	c.Messages = msgs
	if err != nil {
		return nil, 0, 0, err
	}
	// The member's first occurrence: in the model's string before it, a
	// quote is escaped.
	const member, null = `"messages":`, `null`
	at := bytes.Index(head, []byte(member+null)) + len(member)
	n := len(head) + 1 + len(prefix)
	for i := done; i < len(msgs); i++ {
		n += messageLen(&msgs[i]) + 1
	}
	b = make([]byte, 0, n)
	b = append(b, head[:at]...)
	b = append(b, '[')
	start = len(b)
	b = append(b, prefix...)
	end = len(b)
	for i := done; i < len(msgs); i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendMessage(b, &msgs[i])
		if i == mark-1 {
			end = len(b)
		}
	}
	b = append(b, ']')
	return append(b, head[at+len(null):]...), start, end, nil
}

// appendMessage appends m to b as json.Marshal writes it.
func appendMessage(b []byte, m *chatMessage) []byte {
	b = append(b, `{"role":`...)
	b = appendJSONString(b, m.Role)
	b = append(b, `,"content":`...)
	if m.Content == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *m.Content)
	}
	if m.ReasoningContent != nil {
		b = append(b, `,"reasoning_content":`...)
		b = appendJSONString(b, *m.ReasoningContent)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendJSONString(b, tc.ID)
			b = append(b, `,"type":`...)
			b = appendJSONString(b, tc.Type)
			b = append(b, `,"function":{"name":`...)
			b = appendJSONString(b, tc.Function.Name)
			b = append(b, `,"arguments":`...)
			b = appendJSONString(b, tc.Function.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendJSONString(b, m.ToolCallID)
	}
	return append(b, '}')
}

// messageLen is len(appendMessage(nil, m)).
func messageLen(m *chatMessage) int {
	n := len(`{"role":,"content":}`) + jsonStringLen(m.Role) + len("null")
	if m.Content != nil {
		n += jsonStringLen(*m.Content) - len("null")
	}
	if m.ReasoningContent != nil {
		n += len(`,"reasoning_content":`) + jsonStringLen(*m.ReasoningContent)
	}
	if len(m.ToolCalls) > 0 {
		n += len(`,"tool_calls":[]`) + len(m.ToolCalls) - 1
		for _, tc := range m.ToolCalls {
			n += len(`{"id":,"type":,"function":{"name":,"arguments":}}`) + jsonStringLen(tc.ID) + jsonStringLen(tc.Type) +
				jsonStringLen(tc.Function.Name) + jsonStringLen(tc.Function.Arguments)
		}
	}
	if m.ToolCallID != "" {
		n += len(`,"tool_call_id":`) + jsonStringLen(m.ToolCallID)
	}
	return n
}

// chatPrompt is c as routing sees it: the messages as the chat
// template reads them (content as text, an assistant's tool calls) and
// the tools array encoded as in the body.
func chatPrompt(c *chatRequest) (*prompt.Prompt, error) {
	p := &prompt.Prompt{Model: c.Model, Messages: make([]prompt.Message, len(c.Messages))}
	if len(c.Tools) > 0 {
		tools, err := json.Marshal(c.Tools)
		if err != nil {
			return nil, err
		}
		p.Tools = tools
	}
	n := 0
	for i := range c.Messages {
		n += len(c.Messages[i].ToolCalls)
	}
	// One array for every message's calls, as renderMessages has.
	calls := make([]prompt.ToolCall, 0, n)
	for i := range c.Messages {
		m := &c.Messages[i]
		km := prompt.Message{Role: m.Role}
		if m.Content != nil {
			km.Content = *m.Content
		}
		if len(m.ToolCalls) > 0 {
			for _, tc := range m.ToolCalls {
				calls = append(calls, prompt.ToolCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
			km.ToolCalls = calls[len(calls)-len(m.ToolCalls) : len(calls) : len(calls)]
		}
		p.Messages[i] = km
	}
	return p, nil
}

// renderMessages renders items as chat messages. Function calls join the
// assistant message they follow (one assistant turn with text and
// tool_calls); their outputs become tool messages. A reasoning item's
// text is the reasoning_content of the assistant turn that follows it
// (one that nothing follows is left out); a compaction item is its
// summary, as a user message.
//
// It returns as well the last mark in items where the messages so far are
// final, no later item changing them (no assistant message is open to
// the next tool call, no reasoning waits for the next assistant message):
// the items before it and the number of messages they make.
func renderMessages(instructions *string, items []wire.Item) (msgs []chatMessage, markItems, markMsgs int) {
	msgs = make([]chatMessage, 0, len(items)+1)
	if instructions != nil && *instructions != "" {
		msgs = append(msgs, chatMessage{Role: "system", Content: instructions})
	}
	markMsgs = len(msgs)
	assistantOpen := false
	var thinking *string
	assistant := func(m chatMessage) {
		m.ReasoningContent, thinking = thinking, nil
		msgs = append(msgs, m)
		assistantOpen = true
	}
	// Every tool call lives in one array, each message's a run of it: an
	// open assistant message's calls are the last ones added.
	calls := make([]chatToolCall, 0, countCalls(items))
	call := func(c chatToolCall) {
		calls = append(calls, c)
		k := len(calls)
		if !assistantOpen {
			assistant(chatMessage{Role: "assistant", ToolCalls: calls[k-1 : k : k]})
			return
		}
		last := &msgs[len(msgs)-1]
		last.ToolCalls = calls[k-len(last.ToolCalls)-1 : k : k]
	}
	for i := range items {
		if !assistantOpen && thinking == nil {
			markItems, markMsgs = i, len(msgs)
		}
		it := &items[i]
		switch it.Type {
		case wire.ItemMessage:
			role := it.Role
			if role == "developer" {
				// Engines' chat templates know system, not developer.
				role = "system"
			}
			text := itemText(it)
			if role == "assistant" {
				assistant(chatMessage{Role: role, Content: text})
				continue
			}
			msgs = append(msgs, chatMessage{Role: role, Content: text})
			assistantOpen, thinking = false, nil
		case wire.ItemFunctionCall:
			call(chatToolCall{ID: it.CallID, Type: "function", Function: chatFunction{Name: wire.EngineName(it.Namespace, it.Name), Arguments: it.Arguments}})
		case wire.ItemCustomToolCall:
			args, _ := json.Marshal(map[string]string{wire.CustomInputParam: it.Arguments})
			call(chatToolCall{ID: it.CallID, Type: "function", Function: chatFunction{Name: wire.EngineName(it.Namespace, it.Name), Arguments: string(args)}})
		case wire.ItemFunctionCallOutput, wire.ItemCustomToolCallOutput:
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: &it.Output})
			assistantOpen, thinking = false, nil
		case wire.ItemReasoning:
			if text := reasoningTextRef(it); *text != "" {
				thinking = text
			}
			// The turn it belongs to starts after it.
			assistantOpen = false
		case wire.ItemMCPCall:
			call(chatToolCall{ID: it.ID, Type: "function", Function: chatFunction{Name: wire.EngineName(it.ServerLabel, it.Name), Arguments: it.Arguments}})
			out := it.Output
			if it.Error != "" {
				out = "Error: " + errorText(it.Error)
			}
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: it.ID, Content: &out})
			assistantOpen, thinking = false, nil
		case wire.ItemMCPApprovalResponse:
			// A refused call: the model hears of it as the call's result.
			// (An approved one is the mcp_call made for it.)
			req := approvalRequest(items[:i], it.ApprovalRequestID)
			if req == nil || it.Approve == nil || *it.Approve {
				continue
			}
			assistantOpen = false
			call(chatToolCall{ID: req.ID, Type: "function", Function: chatFunction{Name: wire.EngineName(req.ServerLabel, req.Name), Arguments: req.Arguments}})
			out := "The user did not approve this call."
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: req.ID, Content: &out})
			assistantOpen = false
		case wire.ItemCompaction:
			text := compactionPrefix + it.Text()
			msgs = append(msgs, chatMessage{Role: "user", Content: &text})
			assistantOpen, thinking = false, nil
		}
	}
	if !assistantOpen && thinking == nil {
		markItems, markMsgs = len(items), len(msgs)
	}
	return msgs, markItems, markMsgs
}

// countCalls is the number of tool calls renderMessages makes of items,
// or more.
func countCalls(items []wire.Item) int {
	n := 0
	for i := range items {
		switch items[i].Type {
		case wire.ItemFunctionCall, wire.ItemCustomToolCall, wire.ItemMCPCall, wire.ItemMCPApprovalResponse:
			n++
		}
	}
	return n
}

// itemText points to the text of a message item: to its one part's, so
// that a long context's messages allocate nothing of their own, or to
// the parts joined.
func itemText(it *wire.Item) *string {
	if len(it.Content) == 1 {
		return &it.Content[0].Text
	}
	text := it.Text()
	return &text
}

// approvalRequest is the mcp_approval_request of items with id, or nil.
func approvalRequest(items []wire.Item, id string) *wire.Item {
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Type == wire.ItemMCPApprovalRequest && items[i].ID == id {
			return &items[i]
		}
	}
	return nil
}

// compactionPrefix introduces a compaction item's summary to the model.
const compactionPrefix = "Summary of the conversation so far (earlier turns were compacted into it):\n\n"

// reasoningTextRef points to reasoningText(it): to the item's one part
// when it has one, so that rendering a long session allocates nothing
// for each of them.
func reasoningTextRef(it *wire.Item) *string {
	switch {
	case len(it.Content) == 1:
		return &it.Content[0].Text
	case len(it.Content) == 0 && len(it.Summary) == 1:
		return &it.Summary[0].Text
	}
	text := reasoningText(it)
	return &text
}

// reasoningText is a reasoning item's text: its content, else its summary.
func reasoningText(it *wire.Item) string {
	if len(it.Content) > 0 {
		return it.Text()
	}
	if len(it.Summary) == 1 {
		return it.Summary[0].Text
	}
	var b strings.Builder
	for _, p := range it.Summary {
		b.WriteString(p.Text)
	}
	return b.String()
}

// compacted drops what a compaction item stands for: every item before
// the last compaction item but the user, system and developer messages,
// which OpenAI keeps next to a compaction too. Without a compaction item
// items are returned as they are.
func compacted(items []wire.Item) []wire.Item {
	last := -1
	for i := range items {
		if items[i].Type == wire.ItemCompaction {
			last = i
		}
	}
	if last < 0 {
		return items
	}
	out := make([]wire.Item, 0, len(items))
	for i := range items {
		it := &items[i]
		if i < last && !outlivesCompaction(it.Type, it.Role) {
			continue
		}
		out = append(out, *it)
	}
	return out
}

// outlivesCompaction reports whether an item of type typ and role role
// stays in a context before its last compaction item: a user, system or
// developer message does.
func outlivesCompaction(typ, role string) bool {
	return typ == wire.ItemMessage && role != "assistant"
}

// responseFormat maps text.format to chat's response_format; nil for text.
func responseFormat(format json.RawMessage) json.RawMessage {
	var f struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict,omitempty"`
		Description *string         `json:"description,omitempty"`
	}
	if json.Unmarshal(format, &f) != nil {
		return nil
	}
	switch f.Type {
	case "json_object":
		return json.RawMessage(`{"type":"json_object"}`)
	case "json_schema":
		b, _ := json.Marshal(struct {
			Type       string `json:"type"`
			JSONSchema any    `json:"json_schema"`
		}{"json_schema", struct {
			Name        string          `json:"name"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict,omitempty"`
			Description *string         `json:"description,omitempty"`
		}{f.Name, f.Schema, f.Strict, f.Description}})
		return b
	}
	return nil
}

// chatToolChoice is c in chat's shape, nil to leave the choice to the
// engine. A choice that needs a tool when none is offered (every allowed
// tool was hosted) is left out rather than refused by the engine.
func chatToolChoice(c *wire.EngineChoice, tools bool) json.RawMessage {
	switch {
	case c.Mode == "":
		return nil
	case c.Mode == "none":
		return json.RawMessage(`"none"`)
	case !tools:
		return nil
	case c.Mode == "function":
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": c.Name}})
		return b
	}
	b, _ := json.Marshal(c.Mode)
	return b
}

// messageOverhead is the chat template's few tokens around each message.
const messageOverhead = 4

// itemTokens counts one item's share of the prompt with tok, with the
// chat template's per-message overhead.
func itemTokens(tok prompt.Tokenizer, it *wire.Item) int {
	n := tok.Count(it.Arguments) + tok.Count(it.Output) + tok.Count(wire.EngineName(it.Namespace, it.Name)) + tok.Count(it.CallID)
	for _, p := range it.Content {
		n += tok.Count(p.Text)
	}
	if it.Type == wire.ItemReasoning && len(it.Content) == 0 {
		for _, p := range it.Summary {
			n += tok.Count(p.Text)
		}
	}
	return n + messageOverhead
}
