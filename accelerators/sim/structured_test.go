package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// answerMessage is a message or a delta of a chat answer.
type answerMessage struct {
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content"`
	ToolCalls        []ToolCall `json:"tool_calls"`
}

// chatAnswer is a chat completion as the tests of structured output and
// reasoning read it.
type chatAnswer struct {
	Choices []struct {
		Message      answerMessage `json:"message"`
		FinishReason string        `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		usage
		CompletionTokensDetails *completionTokensDetails `json:"completion_tokens_details"`
	} `json:"usage"`
}

// streamedAnswer is a streamed chat answer put back together.
type streamedAnswer struct {
	content, reasoning string
	call               ToolCall
	finish             string
	usage              *chatAnswer
	// order lists what the deltas carried, each kind once, in the order
	// it first came: "reasoning", "content", "call".
	order []string
}

func readStreamed(t *testing.T, resp *http.Response) streamedAnswer {
	t.Helper()
	events, err := readSSE(resp)
	if err != nil {
		t.Fatal(err)
	}
	var s streamedAnswer
	saw := func(kind string) {
		for _, k := range s.order {
			if k == kind {
				return
			}
		}
		s.order = append(s.order, kind)
	}
	for _, ev := range events {
		var c struct {
			Choices []struct {
				Delta        answerMessage `json:"delta"`
				FinishReason *string       `json:"finish_reason"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatalf("chunk %s: %v", ev.data, err)
		}
		if len(c.Usage) > 0 && string(c.Usage) != "null" {
			var u chatAnswer
			json.Unmarshal([]byte(`{"usage":`+string(c.Usage)+`}`), &u)
			s.usage = &u
		}
		for _, ch := range c.Choices {
			d := ch.Delta
			if d.ReasoningContent != nil {
				s.reasoning += *d.ReasoningContent
				saw("reasoning")
			}
			if d.Content != nil && *d.Content != "" {
				s.content += *d.Content
				saw("content")
			}
			for _, tc := range d.ToolCalls {
				if tc.ID != "" {
					s.call.ID, s.call.Type, s.call.Function.Name = tc.ID, tc.Type, tc.Function.Name
				}
				s.call.Function.Arguments += tc.Function.Arguments
				saw("call")
			}
			if ch.FinishReason != nil {
				s.finish = *ch.FinishReason
			}
		}
	}
	return s
}

func streamBody(body string) string {
	return strings.TrimSuffix(body, "}") + `,"stream":true,"stream_options":{"include_usage":true}}`
}

func schemaFormat(schema string) string {
	return `,"response_format":{"type":"json_schema","json_schema":{"name":"answer","strict":true,"schema":` + schema + `}}`
}

func TestResponseFormat(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	tests := []struct{ name, format, schema string }{
		{"json_object", `,"response_format":{"type":"json_object"}`, `{"type":"object"}`},
		{"json_schema without a schema", `,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}`, `{"type":"object"}`},
	}
	for _, c := range schemaCases {
		switch c.name {
		case "strict object", "some optional", "nested objects", "defs ref", "recursive tree", "nullable",
			"zod (agents sdk)", "pydantic", "top-level array", "formats":
			tests = append(tests, struct{ name, format, schema string }{c.name, schemaFormat(c.schema), c.schema})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schema, err := decodeSchema([]byte(tt.schema))
			if err != nil {
				t.Fatal(err)
			}
			for _, prompt := range []string{"plan a trip", "list three birds", "what is the weather"} {
				body := chatBody(prompt, tt.format)
				r := decode[chatAnswer](t, post(t, url, body))
				msg := r.Choices[0].Message
				if msg.Content == nil || r.Choices[0].FinishReason != finishStop {
					t.Fatalf("%q: want JSON content and finish stop, got %+v", prompt, r.Choices[0])
				}
				content := *msg.Content
				v, err := decodeSchema([]byte(content))
				if err != nil {
					t.Fatalf("%q: content %s is not JSON: %v", prompt, content, err)
				}
				if err := validate(schema, schema, v, 0); err != nil {
					t.Fatalf("%q: content %s does not satisfy the schema: %v", prompt, content, err)
				}
				if r.Usage.CompletionTokens != CountTokens(content) {
					t.Errorf("%q: completion_tokens %d for %d bytes of JSON", prompt, r.Usage.CompletionTokens, len(content))
				}
				again := decode[chatAnswer](t, post(t, url, body))
				if c := again.Choices[0].Message.Content; c == nil || *c != content {
					t.Errorf("%q: not deterministic: %s, then %v", prompt, content, c)
				}
				s := readStreamed(t, post(t, url, streamBody(body)))
				if s.content != content || s.finish != finishStop {
					t.Errorf("%q: streamed %s (%s), want %s", prompt, s.content, s.finish, content)
				}
				if s.usage == nil || s.usage.Usage.CompletionTokens != r.Usage.CompletionTokens {
					t.Errorf("%q: streamed usage %+v, want %d completion tokens", prompt, s.usage, r.Usage.CompletionTokens)
				}
			}
		})
	}
}

// TestResponseFormatCut: JSON longer than max_tokens stops there, as an
// engine's does, mid-value.
func TestResponseFormatCut(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	format := schemaFormat(schemaCases[0].schema)
	full := *decode[chatAnswer](t, post(t, url, chatBody("plan a trip", format))).Choices[0].Message.Content
	body := chatBody("plan a trip", format+`,"max_tokens":5`)
	r := decode[chatAnswer](t, post(t, url, body))
	if got := r.Choices[0]; got.FinishReason != finishLength || *got.Message.Content != full[:5*TokenBytes] {
		t.Errorf("cut answer %q (%s), want %q (length)", *got.Message.Content, got.FinishReason, full[:5*TokenBytes])
	}
	if r.Usage.CompletionTokens != 5 {
		t.Errorf("completion_tokens %d, want 5", r.Usage.CompletionTokens)
	}
	if s := readStreamed(t, post(t, url, streamBody(body))); s.content != full[:5*TokenBytes] || s.finish != finishLength {
		t.Errorf("streamed %q (%s)", s.content, s.finish)
	}
}

// TestResponseFormatText: {"type":"text"} is the plain answer.
func TestResponseFormatText(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	plain := decode[chatAnswer](t, post(t, url, chatBody("hello", "")))
	text := decode[chatAnswer](t, post(t, url, chatBody("hello", `,"response_format":{"type":"text"}`)))
	if *plain.Choices[0].Message.Content != *text.Choices[0].Message.Content {
		t.Errorf("text format answered %q, plain %q", *text.Choices[0].Message.Content, *plain.Choices[0].Message.Content)
	}
}

// TestResponseFormatContinued: a JSON answer continued from its start
// (a stream moved to another engine) carries on the same JSON.
func TestResponseFormatContinued(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	format := schemaFormat(schemaCases[0].schema)
	full := *decode[chatAnswer](t, post(t, url, chatBody("plan a trip", format))).Choices[0].Message.Content
	start, _ := json.Marshal(full[:3*TokenBytes])
	body := `{"messages":[{"role":"user","content":"plan a trip"},{"role":"assistant","content":` + string(start) +
		`}],"continue_final_message":true,"add_generation_prompt":false` + format + `}`
	r := decode[chatAnswer](t, post(t, url, body))
	if got := *r.Choices[0].Message.Content; got != full[3*TokenBytes:] {
		t.Errorf("continued with %q, want %q", got, full[3*TokenBytes:])
	}
}

func TestResponseFormatErrors(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	for _, tt := range []struct{ name, format string }{
		{"not an object", `"json"`},
		{"unknown type", `{"type":"yaml"}`},
		{"no json_schema", `{"type":"json_schema"}`},
		{"no name", `{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}`},
		{"schema not an object", `{"type":"json_schema","json_schema":{"name":"x","schema":[1]}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, url, chatBody("hi", `,"response_format":`+tt.format))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"response_format"`) {
				t.Errorf("status %d, body %s", resp.StatusCode, b)
			}
		})
	}
}

// TestToolArgumentsSatisfySchema: a call's arguments satisfy its
// function's schema: integers as integers, enum members, required fields,
// nested objects and arrays.
func TestToolArgumentsSatisfySchema(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	params := `{"type":"object","properties":{"path":{"type":"string"},"line":{"type":"integer","minimum":1},"limit":{"type":"integer"},` +
		`"mode":{"type":"string","enum":["read","write"]},"range":{"type":"object","properties":{"start":{"type":"integer"},"end":{"type":"integer"}},"required":["start","end"]},` +
		`"globs":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["path","line","mode","range","globs"],"additionalProperties":false}`
	schema, _ := decodeSchema([]byte(params))
	tools := `,"tools":[{"type":"function","function":{"name":"read_file","parameters":` + params + `}}]`
	for _, prompt := range []string{"read main.go", "open the config", "show me line 40", "look at the tests"} {
		body := chatBody(prompt, tools)
		r := decode[chatAnswer](t, post(t, url, body))
		if len(r.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("%q: want a call, got %+v", prompt, r.Choices[0])
		}
		args := r.Choices[0].Message.ToolCalls[0].Function.Arguments
		v, err := decodeSchema([]byte(args))
		if err != nil {
			t.Fatalf("%q: arguments %s: %v", prompt, args, err)
		}
		if err := validate(schema, schema, v, 0); err != nil {
			t.Errorf("%q: arguments %s do not satisfy the schema: %v", prompt, args, err)
		}
		// Clients read integer parameters into integer types.
		var typed struct {
			Line, Limit int
			Range       struct{ Start, End int }
		}
		if err := json.Unmarshal([]byte(args), &typed); err != nil {
			t.Errorf("%q: arguments %s do not decode into integers: %v", prompt, args, err)
		}
	}
}
