package hf

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

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

// renderers are the two ways a Template renders Qwen3's template.
var renderers = []struct {
	name   string
	render func(*Template, []prompt.Message, []byte, bool) (string, error)
}{
	{"native", (*Template).Render},
	{"jinja", (*Template).renderJinja},
}

func TestChatFidelity(t *testing.T) {
	m := qwen(t)
	if m.Template.native == nil {
		t.Fatal("Qwen3's template is not rendered natively")
	}
	for _, r := range renderers {
		t.Run(r.name, func(t *testing.T) { checkChats(t, m, r.render) })
	}
}

func checkChats(t *testing.T, m *Model, render func(*Template, []prompt.Message, []byte, bool) (string, error)) {
	cases := chats(t)
	if len(cases) < 200 {
		t.Fatalf("%d chats, want at least 200", len(cases))
	}
	withTools := 0
	for i, c := range cases {
		if len(c.Tools) > 0 && string(c.Tools) != "null" {
			withTools++
		}
		got, err := render(m.Template, c.prompt(), c.Tools, c.AddGenerationPrompt)
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

// FuzzQwen3Native holds the native rendering of Qwen3's template to the
// Jinja engine's for any message contents, roles and tool call arguments.
func FuzzQwen3Native(f *testing.F) {
	f.Add("hi", "<think>\nr\n</think>\n\nok", `{"a": 1}`, "tool", "<tool_response>x</tool_response>", uint8(3))
	f.Add("", "\n</think>", `"s"`, "system", "", uint8(0))
	f.Add("q", "a</think>b</think>\n", `nope`, "user", "x", uint8(255))
	tpl := qwen(f).Template
	f.Fuzz(func(t *testing.T, user, assistant, args, role, extra string, flags uint8) {
		for _, s := range []string{user, assistant, args, role, extra} {
			if !utf8.ValidString(s) {
				return // JSON gives valid UTF-8; gonja would write U+FFFD
			}
		}
		msgs := []prompt.Message{{Role: "system", Content: extra}, {Role: "user", Content: user}, {Role: "assistant", Content: assistant}}
		if flags&1 != 0 {
			msgs[2].ToolCalls = []prompt.ToolCall{{Name: "f", Arguments: args}, {Name: extra, Arguments: "{}"}}
		}
		msgs = append(msgs, prompt.Message{Role: role, Content: extra}, prompt.Message{Role: "assistant", Content: assistant})
		if flags&2 != 0 {
			msgs = msgs[1:]
		}
		var tools []byte
		if flags&4 != 0 {
			tools = []byte(`[{"type": "function", "function": {"name": "f", "parameters": ` + args + `}}]`)
		}
		want, errJ := tpl.renderJinja(msgs, tools, flags&8 != 0)
		got, errN := tpl.Render(msgs, tools, flags&8 != 0)
		if (errJ != nil) != (errN != nil) {
			t.Fatalf("jinja error %v, native error %v", errJ, errN)
		}
		if got != want {
			t.Fatalf("native rendering differs:\ngot  %q\nwant %q", got, want)
		}
	})
}

func TestModelEncodePrompt(t *testing.T) {
	m := qwen(t)
	c := chats(t)[0]
	p := &prompt.Prompt{Messages: c.prompt(), Tools: c.Tools}
	want, err := m.Template.Render(p.Messages, p.Tools, true)
	if err != nil {
		t.Fatal(err)
	}
	inc := NewIncremental(m.Tokenizer, 1<<20)
	for _, tc := range []struct {
		name string
		inc  *Incremental
	}{{"whole", nil}, {"incremental", inc}, {"incremental again", inc}} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := m.EncodePrompt(nil, p, tc.inc, "session")
			if err != nil || !slices.Equal(ids, m.Tokenizer.Encode(nil, want)) {
				t.Errorf("EncodePrompt = %d ids, %v", len(ids), err)
			}
		})
	}
	if inc.Hits() != 1 {
		t.Errorf("Hits = %d, want the second turn reused", inc.Hits())
	}
	if _, err := (&Model{Tokenizer: m.Tokenizer}).EncodePrompt(nil, p, nil, ""); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("no template: err = %v", err)
	}
	if ids, err := (&Model{Tokenizer: m.Tokenizer}).EncodePrompt(nil, &prompt.Prompt{Text: "hi"}, nil, ""); err != nil || len(ids) != 1 {
		t.Errorf("completion: %v, %v", ids, err)
	}
}
