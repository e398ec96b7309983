package stack

import (
	"encoding/json"
	"fmt"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/prompt/hf"
)

// SimTokenizer is a model directory's chat template and tokenizer as the
// simulator takes them (sim.ChatTokenizer): the simulator may import
// nothing of ours above accelerators, so the model is handed to it here.
type SimTokenizer struct{ m *hf.Model }

// LoadSimTokenizer loads the model directory dir for the simulator; it
// must have a chat template.
func LoadSimTokenizer(dir string) (SimTokenizer, error) {
	m, err := hf.Load(dir)
	if err != nil {
		return SimTokenizer{}, fmt.Errorf("sim tokenizer: %w", err)
	}
	if m.Template == nil {
		return SimTokenizer{}, fmt.Errorf("sim tokenizer %s: %w", dir, hf.ErrNoTemplate)
	}
	return SimTokenizer{m}, nil
}

// RenderChat implements sim.ChatTokenizer: the messages as the gateway's
// prompt.Message reads them (content parts' text joined, tool calls of
// assistant messages), through the model's template.
func (s SimTokenizer) RenderChat(messages []sim.ChatMessage, tools json.RawMessage, addGenerationPrompt bool) (string, error) {
	msgs := make([]prompt.Message, len(messages))
	for i := range messages {
		m := &messages[i]
		msgs[i] = prompt.Message{Role: m.Role, Content: m.Content.Text()}
		if m.Role != "assistant" {
			continue
		}
		for _, tc := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, prompt.ToolCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	return s.m.Template.Render(msgs, tools, addGenerationPrompt)
}

// Encode implements sim.ChatTokenizer.
func (s SimTokenizer) Encode(dst []uint32, text string) []uint32 {
	return s.m.Tokenizer.Encode(dst, text)
}

// SystemTokens counts a prompt's opening system message of text system
// as the engines render and tokenize it (bench.Target.SystemTokens); 0
// when the template refuses it.
func (s SimTokenizer) SystemTokens(system string) int {
	text, err := s.m.Template.Render([]prompt.Message{{Role: "system", Content: system}}, nil, false)
	if err != nil {
		return 0
	}
	return len(s.m.Tokenizer.Encode(nil, text))
}

var _ sim.ChatTokenizer = SimTokenizer{}
