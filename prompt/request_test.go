package prompt

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func intp(n int) *int { return &n }

// parseCase is a body and what a parser makes of it: the Request, or the
// Param and Code of its *FieldError.
type parseCase struct {
	name        string
	body        string
	want        *Request
	param, code string
}

var chatCases = []parseCase{
	{name: "malformed", body: `{"model":`, code: "invalid_json"},
	{name: "empty body", body: ``, code: "invalid_json"},
	{name: "blank body", body: " \n\t", code: "invalid_json"},
	{name: "not an object", body: `[1,2]`, code: "invalid_type"},
	{name: "a string", body: `"model"`, code: "invalid_type"},
	{name: "a number", body: `12`, code: "invalid_type"},
	{name: "null body", body: `null`, param: "model", code: "missing_required_parameter"},
	{name: "empty object", body: `{}`, param: "model", code: "missing_required_parameter"},
	{name: "missing model", body: `{"messages":[{"role":"user","content":"hi"}]}`, param: "model", code: "missing_required_parameter"},
	{name: "empty model", body: `{"model":"","messages":[{"role":"user","content":"hi"}]}`, param: "model", code: "missing_required_parameter"},
	{name: "null model", body: `{"model":null,"messages":[{"role":"user","content":"hi"}]}`, param: "model", code: "missing_required_parameter"},
	{name: "model wrong type", body: `{"model":7,"messages":[]}`, param: "model", code: "invalid_type"},
	{name: "model an object", body: `{"model":{"name":"m"},"messages":[]}`, param: "model", code: "invalid_type"},
	// A wrong type is reported even when a later duplicate is right.
	{name: "model wrong then right", body: `{"model":7,"model":"m","messages":[{"role":"user"}]}`, param: "model", code: "invalid_type"},
	{name: "model set then null", body: `{"model":"m","model":null,"messages":[{"role":"user"}]}`, param: "model", code: "missing_required_parameter"},
	// A syntax error anywhere wins over a type error before it.
	{name: "type error then syntax error", body: `{"model":7,"messages":[}`, code: "invalid_json"},
	{name: "trailing data", body: `{"model":"m","messages":[{"role":"user"}]} x`, code: "invalid_json"},
	{name: "two values", body: `{"model":"m","messages":[{"role":"user"}]}{}`, code: "invalid_json"},
	{name: "trailing comma", body: `{"model":"m","messages":[{"role":"user"}],}`, code: "invalid_json"},
	{name: "control character in a string", body: "{\"model\":\"m\x01\",\"messages\":[{\"role\":\"user\"}]}", code: "invalid_json"},
	{name: "bad escape", body: `{"model":"m\x","messages":[{"role":"user"}]}`, code: "invalid_json"},
	{name: "short unicode escape", body: `{"model":"m\u12","messages":[{"role":"user"}]}`, code: "invalid_json"},
	{name: "bad number in an unknown field", body: `{"model":"m","n":01,"messages":[{"role":"user"}]}`, code: "invalid_json"},
	{name: "bad literal in an unknown field", body: `{"model":"m","n":nul,"messages":[{"role":"user"}]}`, code: "invalid_json"},
	{name: "invalid UTF-8 outside a string", body: "{\"model\":\"m\",\xff:1}", code: "invalid_json"},
	{name: "too deep", body: `{"model":"m","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"messages":[{"role":"user"}]}`, code: "invalid_json"},
	{name: "missing messages", body: `{"model":"m"}`, param: "messages", code: "missing_required_parameter"},
	{name: "null messages", body: `{"model":"m","messages":null}`, param: "messages", code: "missing_required_parameter"},
	{name: "messages a string", body: `{"model":"m","messages":"hi"}`, param: "messages", code: "invalid_type"},
	{name: "messages an object", body: `{"model":"m","messages":{"role":"user"}}`, param: "messages", code: "invalid_type"},
	{name: "empty messages", body: `{"model":"m","messages":[]}`, param: "messages", code: "empty_array"},
	{name: "message a number", body: `{"model":"m","messages":[1]}`, param: "messages", code: "invalid_type"},
	{name: "role wrong type", body: `{"model":"m","messages":[{"role":5}]}`, param: "messages.role", code: "invalid_type"},
	{name: "tool_calls an object", body: `{"model":"m","messages":[{"role":"assistant","tool_calls":{}}]}`, param: "messages.tool_calls", code: "invalid_type"},
	{name: "tool call a string", body: `{"model":"m","messages":[{"role":"assistant","tool_calls":["ls"]}]}`, param: "messages.tool_calls", code: "invalid_type"},
	{name: "function a string", body: `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":"ls"}]}]}`, param: "messages.tool_calls.function", code: "invalid_type"},
	{name: "function name wrong type", body: `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":1}}]}]}`, param: "messages.tool_calls.function.name", code: "invalid_type"},
	{name: "arguments an object", body: `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"function":{"name":"ls","arguments":{}}}]}]}`, param: "messages.tool_calls.function.arguments", code: "invalid_type"},
	{name: "content a number", body: `{"model":"m","messages":[{"role":"user","content":5}]}`, param: "messages[0].content", code: "invalid_type"},
	{name: "content an object", body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":{}}]}`, param: "messages[1].content", code: "invalid_type"},
	{name: "content part a number", body: `{"model":"m","messages":[{"role":"user","content":[1]}]}`, param: "messages[0].content", code: "invalid_type"},
	{name: "content part text a number", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}`, param: "messages[0].content", code: "invalid_type"},
	{name: "content bool", body: `{"model":"m","messages":[{"role":"user","content":true}]}`, param: "messages[0].content", code: "invalid_type"},
	// A field's type error in any message comes before a content error.
	{name: "field error after content error", body: `{"model":"m","messages":[{"content":5},{"role":5}]}`, param: "messages.role", code: "invalid_type"},
	{name: "first content error", body: `{"model":"m","messages":[{"content":"a"},{"content":5},{"content":true}]}`, param: "messages[1].content", code: "invalid_type"},
	// content is read as the last duplicate says.
	{name: "content wrong then right", body: `{"model":"m","messages":[{"content":5,"content":"a"}]}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m", Messages: []Message{{Content: "a"}}}}},
	{name: "max_tokens negative", body: `{"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, param: "max_tokens", code: "integer_below_min_value"},
	{name: "max_tokens zero", body: `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, param: "max_tokens", code: "integer_below_min_value"},
	{name: "max_tokens minus zero", body: `{"model":"m","max_tokens":-0,"messages":[{"role":"user","content":"hi"}]}`, param: "max_tokens", code: "integer_below_min_value"},
	{name: "max_completion_tokens zero", body: `{"model":"m","max_completion_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, param: "max_completion_tokens", code: "integer_below_min_value"},
	{name: "max_tokens fraction", body: `{"model":"m","max_tokens":1.5,"messages":[{"role":"user"}]}`, param: "max_tokens", code: "invalid_type"},
	{name: "max_tokens exponent", body: `{"model":"m","max_tokens":1e3,"messages":[{"role":"user"}]}`, param: "max_tokens", code: "invalid_type"},
	{name: "max_tokens too large", body: `{"model":"m","max_tokens":99999999999999999999,"messages":[{"role":"user"}]}`, param: "max_tokens", code: "invalid_type"},
	{name: "max_tokens a string", body: `{"model":"m","max_tokens":"8","messages":[{"role":"user"}]}`, param: "max_tokens", code: "invalid_type"},
	{name: "max_completion_tokens a bool", body: `{"model":"m","max_completion_tokens":true,"messages":[{"role":"user"}]}`, param: "max_completion_tokens", code: "invalid_type"},
	// The first type error in the body is the one reported.
	{name: "first type error", body: `{"model":"m","max_tokens":"8","stream":1,"messages":[{"role":"user"}]}`, param: "max_tokens", code: "invalid_type"},
	{name: "stream a string", body: `{"model":"m","stream":"true","messages":[{"role":"user"}]}`, param: "stream", code: "invalid_type"},
	{name: "stream_options a number", body: `{"model":"m","stream_options":1,"messages":[{"role":"user"}]}`, param: "stream_options", code: "invalid_type"},
	{name: "stream_options an array", body: `{"model":"m","stream_options":[],"messages":[{"role":"user"}]}`, param: "stream_options", code: "invalid_type"},
	{name: "include_usage a string", body: `{"model":"m","stream_options":{"include_usage":"yes"},"messages":[{"role":"user"}]}`, param: "stream_options.include_usage", code: "invalid_type"},
	{name: "prompt_cache_key a number", body: `{"model":"m","prompt_cache_key":1,"messages":[{"role":"user"}]}`, param: "prompt_cache_key", code: "invalid_type"},
	{name: "service_tier an array", body: `{"model":"m","service_tier":["flex"],"messages":[{"role":"user"}]}`, param: "service_tier", code: "invalid_type"},
	{name: "missing model before a bad max_tokens", body: `{"max_tokens":0,"messages":[]}`, param: "model", code: "missing_required_parameter"},
	{name: "bad max_tokens before bad messages", body: `{"model":"m","max_tokens":0,"messages":[]}`, param: "max_tokens", code: "integer_below_min_value"},

	{
		name: "every field",
		body: ` {"model":"m-1","stream":true,"max_tokens":16,"max_completion_tokens":32,
			"stream_options":{"include_usage":true},"prompt_cache_key":"k","service_tier":"flex","safety_identifier":"u-1",
			"tools":[ {"type":"function"} ],"temperature":0.2,"metadata":{"a":[1,{"b":null}]},
			"messages":[
				{"role":"system","content":"be brief"},
				{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]},
				{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{\"path\":\"/tmp\"}"}},{"function":{"name":"pwd"}}]},
				{"role":"tool","tool_call_id":"c1","content":"a\nb"}
			]} `,
		want: &Request{
			Model: "m-1", Stream: true, MaxTokens: intp(16), MaxCompletionTokens: intp(32),
			HasStreamOptions: true, IncludeUsage: true, PromptCacheKey: "k", ServiceTier: "flex", SafetyIdentifier: "u-1",
			Prompt: Prompt{Model: "m-1", Tools: []byte(`[ {"type":"function"} ]`), Messages: []Message{
				{Role: "system", Content: "be brief"},
				{Role: "user", Content: "ab"},
				{Role: "assistant", ToolCalls: []ToolCall{{Name: "ls", Arguments: `{"path":"/tmp"}`}, {Name: "pwd"}}},
				{Role: "tool", Content: "a\nb"},
			}},
		},
	},
	{
		name: "escapes",
		body: `{"model":"m","messages":[{"role":"user","content":"q\"b\\s\/n\nr\rt\tb\bf\fé\u00e9\ud83d\ude00"}]}`,
		want: &Request{Model: "m", Prompt: Prompt{Model: "m", Messages: []Message{{Role: "user", Content: "q\"b\\s/n\nr\rt\tb\bf\féé😀"}}}},
	},
	{
		// Lone and misordered surrogates become U+FFFD, as does invalid UTF-8.
		name: "surrogates and invalid UTF-8",
		body: "{\"model\":\"m\",\"messages\":[{\"role\":\"u\xffx\",\"content\":\"\\ud800a\\udc00\\ud800\\ud83d\\ude00\xed\xa0\x80\"}]}",
		want: &Request{Model: "m", Prompt: Prompt{Model: "m", Messages: []Message{{Role: "u\ufffdx", Content: "\ufffda\ufffd\ufffd😀\ufffd\ufffd\ufffd"}}}},
	},
	{
		name: "escaped keys",
		body: `{"mod\u0065l":"m","messages":[{"r\u006fle":"user","content":"hi"}]}`,
		want: &Request{Model: "m", Prompt: Prompt{Model: "m", Messages: []Message{{Role: "user", Content: "hi"}}}},
	},
	{
		// The last duplicate wins; null means absent for the optional
		// fields and leaves a string as it was.
		name: "duplicates and nulls",
		body: `{"model":"a","model":"b","stream":true,"stream":null,"max_tokens":5,"max_tokens":null,
			"stream_options":{"include_usage":true},"stream_options":null,"tools":[1],"tools":null,
			"prompt_cache_key":"k","prompt_cache_key":null,"service_tier":null,
			"messages":[{"role":"x"}],
			"messages":[{"role":"user","role":null,"content":"c","content":null},null]}`,
		want: &Request{Model: "b", Prompt: Prompt{Model: "b", Messages: []Message{{Role: "user"}, {}}}},
	},
	{
		name: "stream_options without include_usage",
		body: `{"model":"m","stream":true,"stream_options":{},"messages":[{"role":"user"}]}`,
		want: &Request{Model: "m", Stream: true, HasStreamOptions: true, Prompt: Prompt{Model: "m", Messages: []Message{{Role: "user"}}}},
	},
	{
		name: "nested depth at the limit",
		body: `{"model":"m","x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `,"messages":[{"role":"user"}]}`,
		want: &Request{Model: "m", Prompt: Prompt{Model: "m", Messages: []Message{{Role: "user"}}}},
	},
}

var completionCases = []parseCase{
	{name: "malformed", body: `{"model":"m","prompt":[1,]}`, code: "invalid_json"},
	{name: "missing model", body: `{"prompt":"x"}`, param: "model", code: "missing_required_parameter"},
	{name: "missing prompt", body: `{"model":"m"}`, param: "prompt", code: "missing_required_parameter"},
	{name: "null prompt", body: `{"model":"m","prompt":null}`, param: "prompt", code: "missing_required_parameter"},
	{name: "prompt a number", body: `{"model":"m","prompt":5}`, param: "prompt", code: "invalid_type"},
	{name: "prompt an object", body: `{"model":"m","prompt":{}}`, param: "prompt", code: "invalid_type"},
	{name: "prompt mixed", body: `{"model":"m","prompt":[1,"a"]}`, param: "prompt", code: "invalid_type"},
	{name: "negative token id", body: `{"model":"m","prompt":[-1]}`, param: "prompt", code: "invalid_type"},
	{name: "token id too large", body: `{"model":"m","prompt":[4294967296]}`, param: "prompt", code: "invalid_type"},
	{name: "token id a fraction", body: `{"model":"m","prompt":[1.0]}`, param: "prompt", code: "invalid_type"},
	{name: "token ids nested too deep", body: `{"model":"m","prompt":[[[1]]]}`, param: "prompt", code: "invalid_type"},
	{name: "max_tokens negative", body: `{"model":"m","max_tokens":-1,"prompt":"x"}`, param: "max_tokens", code: "integer_below_min_value"},
	{name: "messages are not read", body: `{"model":"m","messages":5,"prompt":"x"}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m", Text: "x"}}},
	{name: "string", body: `{"model":"m","prompt":"once\nupon"}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m", Text: "once\nupon"}}},
	{name: "strings", body: `{"model":"m","prompt":["once ","upon",null]}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m", Text: "once upon"}}},
	{name: "empty array", body: `{"model":"m","prompt":[]}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m"}}},
	{name: "token ids", body: `{"model":"m","prompt":[1,4294967295,null,0]}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m"}, TokenIDs: []uint32{1, 4294967295, 0, 0}}},
	{name: "token id batches", body: `{"model":"m","prompt":[[1,2],null,[3,null]]}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m"}, TokenIDs: []uint32{1, 2, 3, 0}}},
	{name: "empty batches", body: `{"model":"m","prompt":[[]]}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m"}, TokenIDs: []uint32{}}},
	{name: "tools kept", body: `{"model":"m","prompt":"x","tools":[]}`, want: &Request{Model: "m", Prompt: Prompt{Model: "m", Tools: []byte(`[]`), Text: "x"}}},
}

// checkParse runs the cases through parse.
func checkParse(t *testing.T, cases []parseCase, parse func([]byte) (*Request, error)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse([]byte(tc.body))
			if tc.code != "" {
				fe, ok := err.(*FieldError)
				if !ok {
					t.Fatalf("got %+v, %v; want a *FieldError %s/%s", got, err, tc.param, tc.code)
				}
				if fe.Param != tc.param || fe.Code != tc.code {
					t.Fatalf("got %s/%s (%s), want %s/%s", fe.Param, fe.Code, fe.Message, tc.param, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseChat(t *testing.T)       { checkParse(t, chatCases, ParseChat) }
func TestParseCompletion(t *testing.T) { checkParse(t, completionCases, ParseCompletion) }

// TestParseRef holds the reference to the same cases, so that the fuzz
// targets compare against a parser the tables vouch for.
func TestParseRef(t *testing.T) {
	t.Run("chat", func(t *testing.T) {
		checkParse(t, chatCases, func(b []byte) (*Request, error) { return parseRequestRef(b, true) })
	})
	t.Run("completion", func(t *testing.T) {
		checkParse(t, completionCases, func(b []byte) (*Request, error) { return parseRequestRef(b, false) })
	})
}

// benchBodies are the bodies BenchmarkParseChat reads: a one-message chat
// and a 168 KB agent request.
var benchBodies = []struct {
	name string
	body []byte
}{
	{"small", []byte(`{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)},
	{"168KB", agentBody(168 << 10)},
}

// BenchmarkParseChat compares ParseChat with the reference on the same
// bodies.
func BenchmarkParseChat(b *testing.B) {
	for _, parser := range []struct {
		name  string
		parse func([]byte) (*Request, error)
	}{
		{"fast", ParseChat},
		{"ref", func(body []byte) (*Request, error) { return parseRequestRef(body, true) }},
	} {
		for _, bb := range benchBodies {
			b.Run(parser.name+"/"+bb.name, func(b *testing.B) {
				b.SetBytes(int64(len(bb.body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := parser.parse(bb.body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestParseChatAllocs: a body costs its Request and its messages and, when
// it has them, one buffer of decoded strings, one of tool calls and one
// for its token budgets, whatever its length.
func TestParseChatAllocs(t *testing.T) {
	for _, bb := range benchBodies {
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := ParseChat(bb.body); err != nil {
				t.Fatal(err)
			}
		})
		want := 2.0
		if bb.name == "168KB" {
			want = 5
		}
		if allocs > want {
			t.Errorf("%s: %v allocations, want at most %v", bb.name, allocs, want)
		}
	}
}

// TestParseChatIntegerWording: a fraction where an integer belongs is
// called what it is, not "a number, but got number" (issue 32, item 9).
func TestParseChatIntegerWording(t *testing.T) {
	_, err := ParseChat([]byte(`{"model":"m","max_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}`))
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a *FieldError", err)
	}
	want := "Invalid type for 'max_tokens': expected an integer, but got a decimal number (1.5) instead."
	if fe.Message != want {
		t.Errorf("message = %q, want %q", fe.Message, want)
	}
}
