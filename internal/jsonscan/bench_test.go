package jsonscan

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchObject is a JSON object of at least size bytes shaped like an
// agent's chat body: long strings full of \n and \" escapes, some
// non-ASCII text, nested objects and arrays of them.
func benchObject(size int) []byte {
	source := "package main\n\nimport \"fmt\"\n\n// main prints a greeting — with a name when one is given.\n" +
		"func main() {\n\tfmt.Printf(\"héllo, %s!\\n\", \"world\")\n}\n"
	var msgs []map[string]any
	for {
		b, err := json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 4096, "messages": msgs})
		if err != nil {
			panic(err)
		}
		if len(b) >= size {
			return b
		}
		i := len(msgs)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": fmt.Sprintf("I will read file %d.\n", i),
				"tool_calls": []map[string]any{{"id": fmt.Sprintf("call_%d", i), "type": "function",
					"function": map[string]string{"name": "read_file", "arguments": fmt.Sprintf(`{"path":"cmd/%d/main.go"}`, i)}}}},
			map[string]any{"role": "tool", "tool_call_id": fmt.Sprintf("call_%d", i), "content": strings.Repeat(source, 3)})
	}
}

// chunk is an engine's stream chunk, the object read once a token.
const chunk = `{"id":"chatcmpl-7f3a","object":"chat.completion.chunk","created":1733400000,"model":"llama-3.1-8b","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}],"usage":null}`

// BenchmarkMembers splits objects into members: a stream chunk (every
// token) and a 64 KiB agent body, whose values are checked and skipped.
func BenchmarkMembers(b *testing.B) {
	for _, bc := range []struct {
		name string
		data []byte
	}{{"chunk", []byte(chunk)}, {"64KiB", benchObject(64 << 10)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Members(bc.data, func(key, value []byte) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkElements splits an array of 64 KiB of messages.
func BenchmarkElements(b *testing.B) {
	var messages []byte
	if err := Members(benchObject(64<<10), func(key, value []byte) error {
		if string(key) == "messages" {
			messages = value
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(messages)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Elements(messages, func(value []byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkString decodes strings: a short plain one (most values), a
// 16 KiB one full of escapes and a 16 KiB plain one with non-ASCII text.
func BenchmarkString(b *testing.B) {
	escaped, _ := json.Marshal(strings.Repeat("\tfmt.Printf(\"héllo, %s!\\n\", name)\n", 480))
	plain, _ := json.Marshal(strings.Repeat("Prefer small, reviewed changes — never rewrite a file. ", 300))
	for _, bc := range []struct {
		name string
		data []byte
	}{{"short", []byte(`"chat.completion.chunk"`)}, {"escaped", escaped}, {"plain", plain}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := String(bc.data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
