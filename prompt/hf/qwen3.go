package hf

import (
	"bytes"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// qwen3Template is the sha256 of the chat template of the Qwen3 models
// (tools, reasoning kept only after the last user query), which
// renderQwen3 renders natively: the same output as the template run by
// the Jinja engine, byte for byte, in a fraction of the time.
const qwen3Template = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"

// native appends the rendering of a template, made in Go, to dst; ok false sends the call to the Jinja
// engine (inputs the native code does not cover).
type native func(dst []byte, msgs []prompt.Message, tools []byte, addGenerationPrompt bool) (out []byte, ok bool, err error)

const qwen3ToolsHead = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>"
const qwen3ToolsTail = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"

// qwen3Tools renders the tools array of Qwen3's system prompt: each
// tool's JSON on a line. ok false means tools is not an array.
func qwen3Tools(tools string) (string, bool, error) {
	r := renderState{local: true}
	v, err := r.decode([]byte(tools))
	if err != nil {
		return "", true, err
	}
	switch v := v.(type) {
	case nil:
		return "", true, nil
	case list:
		w := jsonWriter{item: ", ", key: ": ", order: r.order}
		for _, t := range v {
			w.b.WriteByte('\n')
			if err := w.writeAny(t); err != nil {
				return "", false, nil
			}
		}
		return w.b.String(), true, nil
	}
	return "", false, nil
}

// jsonCache remembers renderings of JSON: the tools array and the tool
// call arguments of a session come back on every turn.
var jsonCache struct {
	sync.RWMutex
	// protects the fields below
	m map[uint64]renderedJSON
}

type renderedJSON struct {
	raw, out string
	kind     byte
	ok       bool
}

// maxJSONCache bounds the renderings remembered; the cache is emptied
// when it fills, which only costs renders.
const maxJSONCache = 4096

// cachedRender is render(raw), remembered under raw and kind, a byte
// that tells renderings of the same text apart.
func cachedRender(kind byte, raw string, render func(string) (string, bool, error)) (string, bool, error) {
	// Every call of every turn looks its arguments up: no digest is
	// allocated for it.
	h := xxhash.Sum64String(raw) ^ uint64(kind)<<56
	jsonCache.RLock()
	e, hit := jsonCache.m[h]
	jsonCache.RUnlock()
	if hit && e.kind == kind && e.raw == raw {
		return e.out, e.ok, nil
	}
	out, ok, err := render(raw)
	if err != nil {
		return "", ok, err
	}
	jsonCache.Lock()
	if jsonCache.m == nil || len(jsonCache.m) >= maxJSONCache {
		jsonCache.m = make(map[uint64]renderedJSON, maxJSONCache)
	}
	jsonCache.m[h] = renderedJSON{raw: strings.Clone(raw), out: out, kind: kind, ok: ok}
	jsonCache.Unlock()
	return out, ok, nil
}

// qwen3Arguments renders a tool call's arguments as the template does:
// a JSON string decoded, other JSON values by tojson, and text that is
// not JSON (or is null) as it is.
func qwen3Arguments(raw string) (string, bool, error) {
	r := renderState{local: true}
	switch a, _ := r.decode([]byte(raw)); a := a.(type) {
	case string:
		return a, true, nil
	case nil:
		return raw, true, nil
	default:
		w := jsonWriter{item: ", ", key: ": ", order: r.order}
		if err := w.writeAny(a); err != nil {
			return "", false, nil
		}
		return w.b.String(), true, nil
	}
}

func renderQwen3(dst []byte, msgs []prompt.Message, tools []byte, addGenerationPrompt bool) ([]byte, bool, error) {
	var toolText string
	if len(bytes.TrimSpace(tools)) > 0 {
		var ok bool
		var err error
		if toolText, ok, err = cachedRender('t', unsafeString(tools), qwen3Tools); !ok || err != nil {
			return dst, ok, err
		}
	}
	b := slices.Grow(dst, renderSize(msgs)+len(toolText)+len(qwen3ToolsHead)+len(qwen3ToolsTail))
	if toolText != "" {
		b = append(b, "<|im_start|>system\n"...)
		if len(msgs) > 0 && msgs[0].Role == "system" {
			b = append(b, msgs[0].Content...)
			b = append(b, "\n\n"...)
		}
		b = append(b, qwen3ToolsHead...)
		b = append(b, toolText...)
		b = append(b, qwen3ToolsTail...)
	} else if len(msgs) > 0 && msgs[0].Role == "system" {
		b = append(b, "<|im_start|>system\n"...)
		b = append(b, msgs[0].Content...)
		b = append(b, "<|im_end|>\n"...)
	}
	// The last user message that is not a tool response wrapped as one.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		if m.Role == "user" && !(strings.HasPrefix(m.Content, "<tool_response>") && strings.HasSuffix(m.Content, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i := range msgs {
		m := &msgs[i]
		last := i == len(msgs)-1
		switch {
		case m.Role == "user" || (m.Role == "system" && i > 0):
			b = append(b, "<|im_start|>"...)
			b = append(b, m.Role...)
			b = append(b, '\n')
			b = append(b, m.Content...)
			b = append(b, "<|im_end|>\n"...)
		case m.Role == "assistant":
			content, reasoning := m.Content, ""
			if strings.Contains(content, "</think>") {
				content = strings.TrimLeft(content[strings.LastIndex(content, "</think>")+len("</think>"):], "\n")
				before := strings.TrimRight(m.Content[:strings.Index(m.Content, "</think>")], "\n")
				if k := strings.LastIndex(before, "<think>"); k >= 0 {
					before = before[k+len("<think>"):]
				}
				reasoning = strings.TrimLeft(before, "\n")
			}
			b = append(b, "<|im_start|>assistant\n"...)
			if i > lastQuery && (last || reasoning != "") {
				b = append(b, "<think>\n"...)
				b = append(b, strings.Trim(reasoning, "\n")...)
				b = append(b, "\n</think>\n\n"...)
				b = append(b, strings.TrimLeft(content, "\n")...)
			} else {
				b = append(b, content...)
			}
			for k, tc := range m.ToolCalls {
				if k > 0 || content != "" {
					b = append(b, '\n')
				}
				b = append(b, "<tool_call>\n{\"name\": \""...)
				b = append(b, tc.Name...)
				b = append(b, "\", \"arguments\": "...)
				args, ok, _ := cachedRender('a', tc.Arguments, qwen3Arguments)
				if !ok {
					return dst, false, nil
				}
				b = append(b, args...)
				b = append(b, "}\n</tool_call>"...)
			}
			b = append(b, "<|im_end|>\n"...)
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b = append(b, "<|im_start|>user"...)
			}
			b = append(b, "\n<tool_response>\n"...)
			b = append(b, m.Content...)
			b = append(b, "\n</tool_response>"...)
			if last || msgs[i+1].Role != "tool" {
				b = append(b, "<|im_end|>\n"...)
			}
		}
	}
	if addGenerationPrompt {
		b = append(b, "<|im_start|>assistant\n"...)
	}
	return b, true, nil
}

// renderSize is about the bytes a rendering of msgs takes.
func renderSize(msgs []prompt.Message) int {
	n := 64
	for i := range msgs {
		n += len(msgs[i].Content) + 64
		for _, tc := range msgs[i].ToolCalls {
			n += len(tc.Name) + len(tc.Arguments) + 64
		}
	}
	return n
}
