package wire

import (
	"encoding/json"
	"fmt"
)

// Response statuses.
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
	StatusCancelled  = "cancelled"
	StatusIncomplete = "incomplete"
)

// Item types.
const (
	ItemMessage            = "message"
	ItemFunctionCall       = "function_call"
	ItemFunctionCallOutput = "function_call_output"
	ItemReference          = "item_reference"
	// ItemReasoning is a model's reasoning: its text as content
	// (reasoning_text parts) or summary (summary_text parts), and, when
	// the request includes reasoning.encrypted_content, the text sealed
	// for a stateless client to send back (seal.go).
	ItemReasoning = "reasoning"
	// ItemCompaction stands for the conversation before it: a summary
	// the model wrote, sealed in EncryptedContent and kept, expanded, in
	// Content (one summary_text part) for the engine.
	ItemCompaction = "compaction"
	// MCP items (mcp.go): the tools a server lists, a call the gateway
	// made, a call waiting for the client's approval, and the approval.
	ItemMCPListTools        = "mcp_list_tools"
	ItemMCPCall             = "mcp_call"
	ItemMCPApprovalRequest  = "mcp_approval_request"
	ItemMCPApprovalResponse = "mcp_approval_response"
	// A custom tool's call (its freeform input in Arguments) and output.
	ItemCustomToolCall       = "custom_tool_call"
	ItemCustomToolCallOutput = "custom_tool_call_output"
)

// Response is the OpenAI response object as clients see it.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	CompletedAt        *int64             `json:"completed_at"`
	Status             string             `json:"status"`
	Background         bool               `json:"background"`
	Error              *ResponseError     `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []Item             `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Conversation       *ConversationRef   `json:"conversation"`
	Reasoning          *Reasoning         `json:"reasoning"`
	ServiceTier        string             `json:"service_tier"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	Text               TextConfig         `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []json.RawMessage  `json:"tools"`
	TopP               float64            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *Usage             `json:"usage"`
	User               *string            `json:"user"`
	PromptCacheKey     *string            `json:"prompt_cache_key"`
	SafetyIdentifier   *string            `json:"safety_identifier"`
	Metadata           map[string]string  `json:"metadata"`
	// MaxToolCalls, TopLogprobs, Prompt and PromptCacheRetention are
	// echoed from the request; absent when it had none.
	MaxToolCalls         *int            `json:"max_tool_calls,omitempty"`
	TopLogprobs          *int            `json:"top_logprobs,omitempty"`
	Prompt               json.RawMessage `json:"prompt,omitempty"`
	PromptCacheRetention *string         `json:"prompt_cache_retention,omitempty"`
}

// Ended reports whether the response is in a terminal status.
func (r *Response) Ended() bool {
	switch r.Status {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusIncomplete:
		return true
	}
	return false
}

// ResponseError is why a response failed.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails says why a response stopped early.
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// ConversationRef names the conversation a response belongs to.
type ConversationRef struct {
	ID string `json:"id"`
}

// Reasoning is the reasoning configuration echoed back.
type Reasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

// TextConfig is the text output configuration echoed back.
type TextConfig struct {
	Format    json.RawMessage `json:"format"`
	Verbosity *string         `json:"verbosity,omitempty"`
}

// Usage is token accounting taken from the engine's usage block.
type Usage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// Item is one conversation item: a message, a function call or a function
// call's output. Input items, output items and conversation items share it.
type Item struct {
	Type string
	// ID is msg_…, fc_… or fco_…; every stored item has one.
	ID string
	// Status is in_progress, completed or incomplete.
	Status string
	// Role and Content are set for messages.
	Role    string
	Content []ContentPart
	// CallID, Name and Arguments are set for function calls; CallID and
	// Output for function call outputs.
	CallID, Name, Arguments string
	Output                  string
	// Namespace is the namespace tool a function call's function belongs
	// to; "" for a top-level function.
	Namespace string
	// Summary is a reasoning item's summary parts (summary_text).
	Summary []ContentPart
	// EncryptedContent is a reasoning or compaction item's sealed text,
	// as turnpike issued it; "" when the client did not ask for it.
	EncryptedContent string
	// ServerLabel names an MCP item's server. Name and Arguments are an
	// mcp_call's or approval request's; Output an mcp_call's output, or
	// an mcp_list_tools item's tools as JSON; Error what failed.
	ServerLabel, Error string
	// ApprovalRequestID is the approval request an mcp_call or approval
	// response answers; Approve an approval response's answer.
	ApprovalRequestID string
	Approve           *bool
}

// Part types of reasoning and compaction items.
const (
	PartReasoning = "reasoning_text"
	PartSummary   = "summary_text"
)

// includeReasoning is the include value that asks for reasoning items'
// encrypted_content.
const IncludeReasoning = "reasoning.encrypted_content"

// ContentPart is one text part: input_text or output_text of a message,
// reasoning_text or summary_text of a reasoning item.
type ContentPart struct {
	Type string
	Text string
}

// Text concatenates the item's text parts.
func (it *Item) Text() string {
	if len(it.Content) == 1 {
		return it.Content[0].Text
	}
	var n int
	for _, p := range it.Content {
		n += len(p.Text)
	}
	b := make([]byte, 0, n)
	for _, p := range it.Content {
		b = append(b, p.Text...)
	}
	return string(b)
}

type partJSON struct {
	Type        string    `json:"type"`
	Text        string    `json:"text"`
	Annotations *[]string `json:"annotations,omitempty"`
}

var noAnnotations = []string{}

// MarshalJSON writes the OpenAI shape of the part.
func (p ContentPart) MarshalJSON() ([]byte, error) {
	pj := partJSON{Type: p.Type, Text: p.Text}
	if p.Type == "output_text" {
		pj.Annotations = &noAnnotations
	}
	return json.Marshal(pj)
}

// UnmarshalJSON reads a part written by MarshalJSON.
func (p *ContentPart) UnmarshalJSON(b []byte) error {
	var pj partJSON
	if err := json.Unmarshal(b, &pj); err != nil {
		return err
	}
	p.Type, p.Text = pj.Type, pj.Text
	return nil
}

// itemJSON is the union of every item type's fields, for reading.
type itemJSON struct {
	Type      string        `json:"type"`
	ID        string        `json:"id,omitempty"`
	Status    string        `json:"status,omitempty"`
	Role      string        `json:"role,omitempty"`
	Content   []ContentPart `json:"content,omitempty"`
	CallID    string        `json:"call_id,omitempty"`
	Name      string        `json:"name,omitempty"`
	Arguments string        `json:"arguments,omitempty"`
	Output    string        `json:"output,omitempty"`
	Namespace string        `json:"namespace,omitempty"`
	Summary   []ContentPart `json:"summary,omitempty"`
	// EncryptedContent is omitted when empty.
	EncryptedContent  string `json:"encrypted_content,omitempty"`
	ServerLabel       string `json:"server_label,omitempty"`
	Error             string `json:"error,omitempty"`
	ApprovalRequestID string `json:"approval_request_id,omitempty"`
	Approve           *bool  `json:"approve,omitempty"`
}

// MarshalJSON writes exactly the fields OpenAI writes for the item's type.
func (it Item) MarshalJSON() ([]byte, error) {
	switch it.Type {
	case ItemMessage:
		content := it.Content
		if content == nil {
			content = []ContentPart{}
		}
		return json.Marshal(struct {
			Type    string        `json:"type"`
			ID      string        `json:"id"`
			Status  string        `json:"status"`
			Role    string        `json:"role"`
			Content []ContentPart `json:"content"`
		}{it.Type, it.ID, it.Status, it.Role, content})
	case ItemFunctionCall, ItemCustomToolCall:
		// A custom tool's call has its input where a function's has its
		// arguments.
		args, input := &it.Arguments, (*string)(nil)
		if it.Type == ItemCustomToolCall {
			args, input = nil, &it.Arguments
		}
		return json.Marshal(struct {
			Type      string  `json:"type"`
			ID        string  `json:"id"`
			CallID    string  `json:"call_id"`
			Name      string  `json:"name"`
			Namespace string  `json:"namespace,omitempty"`
			Arguments *string `json:"arguments,omitempty"`
			Input     *string `json:"input,omitempty"`
			Status    string  `json:"status"`
		}{it.Type, it.ID, it.CallID, it.Name, it.Namespace, args, input, it.Status})
	case ItemFunctionCallOutput, ItemCustomToolCallOutput:
		return json.Marshal(struct {
			Type   string `json:"type"`
			ID     string `json:"id"`
			CallID string `json:"call_id"`
			Output string `json:"output"`
			Status string `json:"status"`
		}{it.Type, it.ID, it.CallID, it.Output, it.Status})
	case ItemReasoning:
		summary := it.Summary
		if summary == nil {
			summary = []ContentPart{}
		}
		var enc *string
		if it.EncryptedContent != "" {
			enc = &it.EncryptedContent
		}
		return json.Marshal(struct {
			Type             string        `json:"type"`
			ID               string        `json:"id"`
			Summary          []ContentPart `json:"summary"`
			Content          []ContentPart `json:"content,omitempty"`
			EncryptedContent *string       `json:"encrypted_content"`
			Status           string        `json:"status,omitempty"`
		}{it.Type, it.ID, summary, it.Content, enc, it.Status})
	case ItemMCPListTools:
		tools := json.RawMessage(it.Output)
		if len(tools) == 0 {
			tools = json.RawMessage(`[]`)
		}
		return json.Marshal(struct {
			Type        string          `json:"type"`
			ID          string          `json:"id"`
			ServerLabel string          `json:"server_label"`
			Tools       json.RawMessage `json:"tools"`
			Error       *string         `json:"error"`
		}{it.Type, it.ID, it.ServerLabel, tools, optional(it.Error)})
	case ItemMCPCall:
		return json.Marshal(struct {
			Type              string          `json:"type"`
			ID                string          `json:"id"`
			ServerLabel       string          `json:"server_label"`
			Name              string          `json:"name"`
			Arguments         string          `json:"arguments"`
			Output            *string         `json:"output"`
			Error             json.RawMessage `json:"error"`
			Status            string          `json:"status,omitempty"`
			ApprovalRequestID *string         `json:"approval_request_id"`
		}{it.Type, it.ID, it.ServerLabel, it.Name, it.Arguments, optional(it.Output), rawOrNull(it.Error), it.Status, optional(it.ApprovalRequestID)})
	case ItemMCPApprovalRequest:
		return json.Marshal(struct {
			Type        string `json:"type"`
			ID          string `json:"id"`
			ServerLabel string `json:"server_label"`
			Name        string `json:"name"`
			Arguments   string `json:"arguments"`
		}{it.Type, it.ID, it.ServerLabel, it.Name, it.Arguments})
	case ItemMCPApprovalResponse:
		return json.Marshal(struct {
			Type              string `json:"type"`
			ID                string `json:"id"`
			ApprovalRequestID string `json:"approval_request_id"`
			Approve           bool   `json:"approve"`
		}{it.Type, it.ID, it.ApprovalRequestID, it.Approve != nil && *it.Approve})
	case ItemCompaction:
		return json.Marshal(struct {
			Type             string `json:"type"`
			ID               string `json:"id"`
			EncryptedContent string `json:"encrypted_content"`
		}{it.Type, it.ID, it.EncryptedContent})
	}
	return nil, fmt.Errorf("responses: cannot encode item of type %q", it.Type)
}

// UnmarshalJSON reads an item written by MarshalJSON (stored items). Client
// input goes through the strict decoder instead.
func (it *Item) UnmarshalJSON(b []byte) error {
	var ij struct {
		itemJSON
		// Tools is an mcp_list_tools item's, kept in Output.
		Tools json.RawMessage `json:"tools"`
		// Error shadows itemJSON's: an mcp_call's is an object.
		Error json.RawMessage `json:"error"`
		// Input is a custom tool call's, kept in Arguments.
		Input string `json:"input"`
	}
	if err := json.Unmarshal(b, &ij); err != nil {
		return err
	}
	*it = Item(ij.itemJSON)
	if it.Type == ItemMCPListTools && len(ij.Tools) > 0 {
		it.Output = string(ij.Tools)
	}
	if it.Type == ItemCustomToolCall {
		it.Arguments = ij.Input
	}
	switch {
	case isNull(ij.Error):
	case ij.Error[0] == '"':
		json.Unmarshal(ij.Error, &it.Error)
	default:
		it.Error = string(ij.Error)
	}
	return nil
}

// optional is s as a JSON string, or null when empty.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// rawOrNull is s, JSON, or null when empty.
func rawOrNull(s string) json.RawMessage {
	if s == "" || !json.Valid([]byte(s)) {
		return json.RawMessage("null")
	}
	return json.RawMessage(s)
}

// Conversation is the OpenAI conversation object.
type Conversation struct {
	ID        string            `json:"id"`
	Object    string            `json:"object"`
	CreatedAt int64             `json:"created_at"`
	Metadata  map[string]string `json:"metadata"`
}

// ItemList is a page of items: a response's input items or a
// conversation's items.
type ItemList struct {
	Object  string  `json:"object"`
	Data    []Item  `json:"data"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
	HasMore bool    `json:"has_more"`
}

// Deleted is the answer to a delete.
type Deleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}
