package responses

import (
	"errors"
	"testing"

	"github.com/turnpike-gateway/turnpike/apierror"
)

func TestDecodeCreateRequest(t *testing.T) {
	tests := []struct {
		name, body  string
		param, code string
	}{
		{"minimal", `{"model":"m","input":"hi"}`, "", ""},
		{"items", `{"model":"m","input":[{"role":"developer","content":"d"},{"type":"message","role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"ok"},{"type":"item_reference","id":"msg_1"}]}`, "", ""},
		{"all fields", `{"model":"m","input":"x","instructions":"i","store":true,"stream":false,"background":false,"tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":true}],"tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":true,"max_output_tokens":5,"temperature":0.5,"top_p":1,"metadata":{"a":"b"},"truncation":"auto","text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"},"strict":true}},"service_tier":"priority","prompt_cache_key":"k","safety_identifier":"s","user":"u","include":[],"reasoning":{"effort":"low"},"stream_options":{"include_obfuscation":false},"conversation":null}`, "", ""},
		{"not an object", `[1]`, "", "invalid_json"},
		{"truncated", `{"model":"m"`, "", "invalid_json"},
		{"unknown top-level", `{"model":"m","input":"x","foo":1}`, "foo", "unknown_parameter"},
		{"unknown in item", `{"model":"m","input":[{"role":"user","content":"x","bar":1}]}`, "input[0].bar", "unknown_parameter"},
		{"model type", `{"model":5,"input":"x"}`, "model", "invalid_type"},
		{"input type", `{"model":"m","input":5}`, "input", "invalid_type"},
		{"bad role", `{"model":"m","input":[{"role":"robot","content":"x"}]}`, "input[0].role", "invalid_value"},
		{"bad item type", `{"model":"m","input":[{"type":"web_search_call"}]}`, "input[0].type", "invalid_value"},
		{"temperature range", `{"model":"m","input":"x","temperature":3}`, "temperature", "decimal_above_max_value"},
		{"max tokens type", `{"model":"m","input":"x","max_output_tokens":1.5}`, "max_output_tokens", "invalid_type"},
		{"hosted tool", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type", "unsupported_value"},
		{"both chain and conversation", `{"model":"m","input":"x","previous_response_id":"r","conversation":"c"}`, "previous_response_id", "mutually_exclusive_parameters"},
		{"metadata value type", `{"model":"m","input":"x","metadata":{"a":1}}`, "metadata.a", "invalid_type"},
		{"missing model", `{"input":"x"}`, "model", "missing_required_parameter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeCreateRequest([]byte(tc.body))
			if tc.code == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var e *apierror.Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want an invalid request error", err)
			}
			if e.Param != tc.param || e.Code != tc.code {
				t.Errorf("param %q code %q, want %q %q (%s)", e.Param, e.Code, tc.param, tc.code, e.Message)
			}
		})
	}
}

func FuzzDecodeCreateRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"o"}]}]}`,
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":"required","text":{"format":{"type":"json_object"}}}`,
		`{"model":"m","input":"x","conversation":{"id":"conv_1"},"reasoning":{"effort":"high","summary":"auto"}}`,
		`{"model":1e400}`, `null`, ``, `{"input":[null]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeCreateRequest(body)
		if err != nil {
			var e *apierror.Error
			if !errors.As(err, &e) || e.Message == "" {
				t.Fatalf("error without a class or message: %v", err)
			}
			return
		}
		if req.Model == "" {
			t.Fatal("accepted a request without a model")
		}
		// Whatever decodes must render for an engine, and the prompt the
		// KV index hashes must be what the engine's template makes of it.
		body, p, err := renderChat(req, req.Input)
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		if len(p.Messages) > 0 { // an engine refuses an empty chat anyway
			checkPrompt(t, body, p)
		}
	})
}

func TestItemCodecRoundTrip(t *testing.T) {
	for _, it := range []Item{
		{Type: ItemMessage, ID: "msg_1", Status: "completed", Role: "user", Content: []ContentPart{{Type: "input_text", Text: "héllo"}, {Type: "input_text", Text: ""}}},
		{Type: ItemFunctionCall, ID: "fc_1", Status: "completed", CallID: "call_1", Name: "f", Arguments: `{"a":1}`},
		{Type: ItemFunctionCallOutput, ID: "fco_1", CallID: "call_1", Output: "out"},
	} {
		got, err := decodeStoredItem(encodeItem(nil, &it))
		if err != nil || got.Type != it.Type || got.ID != it.ID || got.Text() != it.Text() || got.Arguments != it.Arguments || got.Output != it.Output || len(got.Content) != len(it.Content) {
			t.Errorf("round trip of %+v: %+v, %v", it, got, err)
		}
	}
	if _, err := decodeStoredItem([]byte{itemCodecV1, 200}); err == nil {
		t.Error("accepted a truncated item")
	}
}
