package sim

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkDecodeChatRequest decodes an agent's chat turn as the gateway
// forwards it: a long system prompt, a user message and tool rounds.
func BenchmarkDecodeChatRequest(b *testing.B) {
	msgs := []map[string]any{
		{"role": "system", "content": strings.Repeat("You are a careful coding agent working in a large repository. ", 200)},
		{"role": "user", "content": "Fix the failing test in the parser."},
	}
	for i := range 8 {
		id := "call_" + string(rune('a'+i))
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": id, "type": "function", "function": map[string]any{"name": "read", "arguments": `{"path":"lex.go"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": strings.Repeat("func lex(s string) []token {\n\treturn nil\n}\n", 30)},
		)
	}
	body, err := json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 64, "messages": msgs})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeChatRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
