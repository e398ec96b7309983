package hf

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/prompt"
)

type chatCase struct {
	Messages []struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		ToolCalls []struct {
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Text                string          `json:"text"`
	IDs                 []uint32        `json:"ids"`
}

func (c *chatCase) prompt() []prompt.Message {
	msgs := make([]prompt.Message, len(c.Messages))
	for i, m := range c.Messages {
		msgs[i] = prompt.Message{Role: m.Role, Content: m.Content}
		for _, tc := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, prompt.ToolCall{Name: tc.Function.Name, Arguments: string(tc.Function.Arguments)})
		}
	}
	return msgs
}

func chats(tb testing.TB) []chatCase {
	return readJSONL[chatCase](tb, "testdata/chats.jsonl.gz")
}

func TestChatFidelity(t *testing.T) {
	m := qwen(t)
	cases := chats(t)
	if len(cases) < 200 {
		t.Fatalf("%d chats, want at least 200", len(cases))
	}
	withTools := 0
	for i, c := range cases {
		if len(c.Tools) > 0 && string(c.Tools) != "null" {
			withTools++
		}
		got, err := m.Template.Render(c.prompt(), c.Tools, c.AddGenerationPrompt)
		if err != nil {
			t.Fatalf("chat %d: %v", i, err)
		}
		if got != c.Text {
			k := 0
			for k < min(len(got), len(c.Text)) && got[k] == c.Text[k] {
				k++
			}
			t.Fatalf("chat %d: rendering differs at byte %d:\ngot  %q\nwant %q", i, k, got[max(0, k-80):min(len(got), k+80)], c.Text[max(0, k-80):min(len(c.Text), k+80)])
		}
		if ids := m.Tokenizer.Encode(nil, got); !slices.Equal(ids, c.IDs) {
			t.Fatalf("chat %d: ids differ at %d", i, firstDiff(ids, c.IDs))
		}
	}
	if withTools < 200 {
		t.Errorf("%d chats with tools, want at least 200", withTools)
	}
}

func TestRenderErrors(t *testing.T) {
	tpl, err := NewTemplate(Config{ChatTemplate: `{% if messages|length == 0 %}{{ raise_exception("no messages") }}{% endif %}{{ messages[0].content }}`})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Render(nil, nil, false); err == nil || !strings.Contains(err.Error(), "no messages") {
		t.Errorf("raise_exception: err = %v", err)
	}
	if got, err := tpl.Render([]prompt.Message{{Role: "user", Content: "hi"}}, nil, false); err != nil || got != "hi" {
		t.Errorf("Render = %q, %v", got, err)
	}
	if _, err := tpl.Render([]prompt.Message{{Role: "user"}}, []byte(`[{"a":`), false); err == nil {
		t.Error("bad tools JSON: no error")
	}
	if _, err := NewTemplate(Config{ChatTemplate: `{% if %}`}); err == nil {
		t.Error("bad template: no error")
	}
}
