package prompt

import (
	"encoding/json"
	"fmt"
	"strings"
)

// agentBody is a chat body shaped like a coding agent's request of at
// least size bytes: a long system prompt, a tools array with JSON schemas,
// and a history of turns in which the assistant calls tools whose
// arguments are JSON in a string and the tools answer with source files.
// Nearly every string has \n and \" escapes, some have non-ASCII text.
func agentBody(size int) []byte {
	type function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type toolCall struct {
		ID       string   `json:"id"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	type message struct {
		Role       string     `json:"role"`
		Content    any        `json:"content"`
		ToolCalls  []toolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}
	system := strings.Repeat("You are a coding agent working in a Go repository.\n"+
		"- Read files before you edit them; say \"done\" when the task is complete.\n"+
		"- Prefer small, reviewed changes — never rewrite a file you have not read.\n", 40)
	tools := `[{"type":"function","function":{"name":"read_file","description":"Read a file.","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},` +
		`{"type":"function","function":{"name":"edit_file","description":"Replace text in a file.","parameters":{"type":"object","properties":{"path":{"type":"string"},"old":{"type":"string"},"new":{"type":"string"}},"required":["path","old","new"]}}},` +
		`{"type":"function","function":{"name":"run","description":"Run a shell command.","parameters":{"type":"object","properties":{"cmd":{"type":"string"},"timeout_s":{"type":"integer","minimum":1}},"required":["cmd"]}}}]`
	source := "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\n// main prints a greeting — with a name when one is given.\n" +
		"func main() {\n\tname := \"world\"\n\tif len(os.Args) > 1 {\n\t\tname = os.Args[1]\n\t}\n" +
		"\tfmt.Printf(\"héllo, %s!\\n\", name)\n}\n"
	msgs := []message{{Role: "system", Content: system}, {Role: "user", Content: "Fix the failing build in ./cmd and run the tests."}}
	body := func() []byte {
		b, err := json.Marshal(map[string]any{
			"model": "agent-model", "stream": true, "max_tokens": 4096,
			"stream_options": map[string]bool{"include_usage": true},
			"tools":          json.RawMessage(tools), "messages": msgs,
		})
		if err != nil {
			panic(err)
		}
		return b
	}
	for turn := 0; ; turn++ {
		path := fmt.Sprintf("cmd/tool%d/main.go", turn)
		args, _ := json.Marshal(map[string]string{"path": path})
		edit, _ := json.Marshal(map[string]string{"path": path, "old": "\"world\"", "new": "\"gopher\"\n"})
		msgs = append(msgs,
			message{Role: "assistant", Content: fmt.Sprintf("I will read %s first, then edit it.\n", path), ToolCalls: []toolCall{
				{ID: fmt.Sprintf("call_%d_a", turn), Type: "function", Function: function{Name: "read_file", Arguments: string(args)}},
				{ID: fmt.Sprintf("call_%d_b", turn), Type: "function", Function: function{Name: "edit_file", Arguments: string(edit)}},
			}},
			message{Role: "tool", ToolCallID: fmt.Sprintf("call_%d_a", turn), Content: strings.Repeat(source, 3)},
			message{Role: "tool", ToolCallID: fmt.Sprintf("call_%d_b", turn), Content: []map[string]string{{"type": "text", "text": "Edited " + path + ".\n"}}},
			message{Role: "user", Content: "Good. Now run \"go test ./...\" and fix what fails."},
		)
		if b := body(); len(b) >= size {
			return b
		}
	}
}
