package gateway

import (
	"encoding/json"
	"strings"

	"github.com/turnpike-gateway/turnpike/kv"
)

// chatMessage is a chat message as far as prefix hashing reads it.
type chatMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// prompt renders the request into the canonical prompt the KV index
// hashes. It returns nil when the messages cannot be read, which routes
// the request on load alone.
func (r *engineRequest) prompt() *kv.Prompt {
	p := &kv.Prompt{Model: r.Model, Tools: r.Tools}
	if r.Messages == nil {
		var text string
		if json.Unmarshal(r.Prompt, &text) != nil {
			return nil
		}
		p.Text = text
		return p
	}
	var msgs []chatMessage
	if json.Unmarshal(r.Messages, &msgs) != nil {
		return nil
	}
	p.Messages = make([]kv.Message, len(msgs))
	for i, m := range msgs {
		km := kv.Message{Role: m.Role, Content: contentText(m.Content)}
		for _, tc := range m.ToolCalls {
			km.ToolCalls = append(km.ToolCalls, kv.ToolCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		p.Messages[i] = km
	}
	return p
}

// contentText is a message's text: the string, or its text parts joined.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		var s string
		json.Unmarshal(raw, &s)
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, part := range parts {
		b.WriteString(part.Text)
	}
	return b.String()
}
