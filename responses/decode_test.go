package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	oairesponses "github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
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
		// A hosted tool used to be refused here; it is decoded now and
		// Config.HostedTools drops or refuses it (TestHostedToolPolicy).
		// Tools of types turnpike does not know, or not yet, are refused.
		{"hosted tool", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "", ""},
		{"unknown tool type", `{"model":"m","input":"x","tools":[{"type":"teleport"}]}`, "tools[0].type", "invalid_value"},
		{"custom grammar syntax", `{"model":"m","input":"x","tools":[{"type":"custom","name":"c","format":{"type":"grammar","syntax":"peg","definition":"x"}}]}`, "tools[0].format.syntax", "invalid_value"},
		{"custom call input", `{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"n"}]}`, "input[0].input", "missing_required_parameter"},
		{"mcp connector", `{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"s","connector_id":"connector_gmail"}]}`, "tools[0].connector_id", "unsupported_value"},
		{"mcp url", `{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"s","server_url":"file:///etc"}]}`, "tools[0].server_url", "invalid_value"},
		{"mcp approval", `{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"s","server_url":"http://x","require_approval":"sometimes"}]}`, "tools[0].require_approval", "invalid_value"},
		{"mcp twice", `{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"s","server_url":"http://x"},{"type":"mcp","server_label":"s","server_url":"http://y"}]}`, "tools[1].server_label", "duplicate_server_label"},
		{"mcp in background", `{"model":"m","input":"x","background":true,"tools":[{"type":"mcp","server_label":"s","server_url":"http://x"}]}`, "background", "unsupported_value"},
		{"mcp approval response", `{"model":"m","input":[{"type":"mcp_approval_response","approval_request_id":"mcpr_1"}]}`, "input[0].approve", "missing_required_parameter"},
		{"mcp call status", `{"model":"m","input":[{"type":"mcp_call","id":"mcp_1","server_label":"s","name":"n","arguments":"{}","status":"odd"}]}`, "input[0].status", "invalid_value"},
		{"both chain and conversation", `{"model":"m","input":"x","previous_response_id":"r","conversation":"c"}`, "previous_response_id", "mutually_exclusive_parameters"},
		{"metadata value type", `{"model":"m","input":"x","metadata":{"a":1}}`, "metadata.a", "invalid_type"},
		{"missing model", `{"input":"x"}`, "model", "missing_required_parameter"},

		// What real clients send, accepted.
		{"codex request", codexRequest, "", ""},
		{"client_metadata", `{"model":"m","input":"x","client_metadata":{"x-codex-installation-id":"i"}}`, "", ""},
		{"context_management", `{"model":"m","input":"x","context_management":[{"type":"compaction","compact_threshold":1000}]}`, "", ""},
		{"prompt_cache_options", `{"model":"m","input":"x","prompt_cache_options":{"mode":"explicit","ttl":"12h","prewarm":true,"comparison_response_id":"resp_1"}}`, "", ""},
		{"prompt_cache_retention", `{"model":"m","input":"x","prompt_cache_retention":"24h"}`, "", ""},
		{"max_tool_calls", `{"model":"m","input":"x","max_tool_calls":3}`, "", ""},
		{"top_logprobs", `{"model":"m","input":"x","top_logprobs":5}`, "", ""},
		{"include values", `{"model":"m","input":"x","include":["reasoning.encrypted_content","message.output_text.logprobs"]}`, "", ""},
		{"moderation", `{"model":"m","input":"x","moderation":{"model":"omni-moderation-latest","policy":{"input":{"mode":"block"}}}}`, "", ""},
		{"prompt", `{"model":"m","input":"x","prompt":{"id":"pmpt_1","version":"2","variables":{"city":"Paris","note":{"type":"input_text","text":"t"}}}}`, "", ""},
		{"access_programs and image", `{"model":"m","input":"x","access_programs":{"cyber":"standard"},"image":{"context_compression":"auto"}}`, "", ""},
		{"reasoning context and mode", `{"model":"m","input":"x","reasoning":{"effort":"max","summary":"auto","context":"all_turns","mode":"pro"}}`, "", ""},
		{"service tiers", `{"model":"m","input":"x","service_tier":"fast"}`, "", ""},
		{"function tool extras", `{"model":"m","input":"x","tools":[{"type":"function","name":"f","defer_loading":false,"async":false,"allowed_callers":["direct"],"output_schema":{"type":"object"}}]}`, "", ""},
		{"allowed tools choice", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"web_search"}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"f"},{"type":"web_search"}]}}`, "", ""},
		{"hosted tool choice", `{"model":"m","input":"x","tools":[{"type":"file_search","vector_store_ids":["v"]}],"tool_choice":{"type":"file_search"}}`, "", ""},
		{"item extras", `{"model":"m","input":[{"role":"assistant","phase":"commentary","content":[{"type":"output_text","text":"t"}]},{"role":"user","content":[{"type":"input_text","text":"x","prompt_cache_breakpoint":{}}]},{"type":"function_call","call_id":"c","name":"f","namespace":"ns","arguments":"{}"},{"type":"function_call_output","call_id":"c","name":"f","namespace":"ns","output":"o"}]}`, "", ""},

		// Strict for types and values still.
		{"client_metadata value", `{"model":"m","input":"x","client_metadata":{"k":1}}`, "client_metadata.k", "invalid_type"},
		{"context_management type", `{"model":"m","input":"x","context_management":[{"type":"summarise"}]}`, "context_management[0].type", "invalid_value"},
		{"context_management unknown", `{"model":"m","input":"x","context_management":[{"type":"compaction","when":1}]}`, "context_management[0].when", "unknown_parameter"},
		{"context_management missing type", `{"model":"m","input":"x","context_management":[{"compact_threshold":1}]}`, "context_management[0].type", "missing_required_parameter"},
		{"prompt_cache_options ttl", `{"model":"m","input":"x","prompt_cache_options":{"ttl":"1y"}}`, "prompt_cache_options.ttl", "invalid_value"},
		{"prompt_cache_retention value", `{"model":"m","input":"x","prompt_cache_retention":"forever"}`, "prompt_cache_retention", "invalid_value"},
		{"max_tool_calls type", `{"model":"m","input":"x","max_tool_calls":"3"}`, "max_tool_calls", "invalid_type"},
		{"top_logprobs range", `{"model":"m","input":"x","top_logprobs":21}`, "top_logprobs", "integer_above_max_value"},
		{"include value", `{"model":"m","input":"x","include":["everything"]}`, "include[0]", "invalid_value"},
		{"moderation model", `{"model":"m","input":"x","moderation":{}}`, "moderation.model", "missing_required_parameter"},
		{"moderation mode", `{"model":"m","input":"x","moderation":{"model":"x","policy":{"output":{"mode":"ban"}}}}`, "moderation.policy.output.mode", "invalid_value"},
		{"prompt id", `{"model":"m","input":"x","prompt":{"version":"1"}}`, "prompt.id", "missing_required_parameter"},
		{"prompt variable", `{"model":"m","input":"x","prompt":{"id":"p","variables":{"v":3}}}`, "prompt.variables.v", "invalid_type"},
		{"stream_options unknown", `{"model":"m","input":"x","stream_options":{"include_usage":true}}`, "stream_options.include_usage", "unknown_parameter"},
		{"reasoning mode", `{"model":"m","input":"x","reasoning":{"mode":"genius"}}`, "reasoning.mode", "invalid_value"},
		{"service tier", `{"model":"m","input":"x","service_tier":"gold"}`, "service_tier", "invalid_value"},
		{"namespace without tools", `{"model":"m","input":"x","tools":[{"type":"namespace","name":"ns"}]}`, "tools[0].tools", "missing_required_parameter"},
		{"namespace member type", `{"model":"m","input":"x","tools":[{"type":"namespace","name":"ns","tools":[{"type":"web_search"}]}]}`, "tools[0].tools[0].type", "invalid_value"},
		{"namespace member unknown field", `{"model":"m","input":"x","tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f","color":"red"}]}]}`, "tools[0].tools[0].color", "unknown_parameter"},
		{"namespace name collides", `{"model":"m","input":"x","tools":[{"type":"function","name":"ns__f"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]}]}`, "tools", "duplicate_tool_name"},
		{"allowed_callers value", `{"model":"m","input":"x","tools":[{"type":"function","name":"f","allowed_callers":["anyone"]}]}`, "tools[0].allowed_callers[0]", "invalid_value"},
		{"mcp tool choice", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"mcp","label":"s"}}`, "tool_choice.label", "unknown_parameter"},
		{"allowed tools mode", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"any","tools":[]}}`, "tool_choice.mode", "invalid_value"},
		{"phase value", `{"model":"m","input":[{"role":"assistant","phase":"draft","content":"t"}]}`, "input[0].phase", "invalid_value"},
		{"namespace type in an item", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","namespace":1,"arguments":"{}"}]}`, "input[0].namespace", "invalid_type"},
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
		`{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"n","input":"*** Begin"},{"type":"custom_tool_call_output","call_id":"c","output":"ok"}],"tools":[{"type":"custom","name":"n","format":{"type":"text"}},{"type":"namespace","name":"ns","tools":[{"type":"custom","name":"m"}]}],"tool_choice":{"type":"custom","name":"n"}}`,
		`{"model":"m","input":[{"type":"mcp_list_tools","id":"mcpl_1","server_label":"s","tools":[{"name":"add","input_schema":{"type":"object"},"annotations":{}}]},{"type":"mcp_call","id":"mcp_1","server_label":"s","name":"add","arguments":"{}","output":"3","status":"completed"},{"type":"mcp_approval_request","id":"mcpr_1","server_label":"s","name":"add","arguments":"{}"},{"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":true}],"tools":[{"type":"mcp","server_label":"s","server_url":"https://x","headers":{"a":"b"},"allowed_tools":{"tool_names":["add"]},"require_approval":{"never":{"tool_names":["add"]}}}],"tool_choice":{"type":"mcp","server_label":"s","name":"add"}}`,
		`{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"s"}],"content":[{"type":"reasoning_text","text":"t"}],"encrypted_content":"AQ","status":"completed"},{"type":"compaction","id":"cmp_1","encrypted_content":"AQ","created_by":"x"}],"include":["reasoning.encrypted_content"]}`,
		`{"model":"m","input":[{"type":"reasoning","summary":[{"type":"reasoning_text","text":"s"}]}]}`, `{"model":"m","input":[{"type":"compaction"}]}`,
		codexRequest,
		`{"model":"m","input":"x","tools":[{"type":"namespace","name":"n_","tools":[{"type":"function","name":"a"}]},{"type":"function","name":"n__a"}]}`,
		`{"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"web_search"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"f"}]}}`,
		`{"model":"m","input":"x","context_management":[{"type":"compaction","compact_threshold":5}],"prompt_cache_options":{"ttl":"30m"},"moderation":{"model":"x"},"prompt":{"id":"p","variables":{"a":"b"}}}`,
		`{"model":"m","input":"x","max_tool_calls":1,"top_logprobs":20,"prompt_cache_retention":"in_memory","access_programs":{},"image":{},"client_metadata":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeCreateRequest(body)
		if err != nil {
			checkAPIError(t, err)
			return
		}
		// A copy decoded from a body overwritten after is the same
		// request: it keeps nothing of the body but a background's.
		staged := bytes.Clone(body)
		cp, err := DecodeCreateRequestCopy(staged)
		if err != nil {
			t.Fatalf("decoded once, refused as a copy: %v", err)
		}
		for i := range staged {
			staged[i] = 'x'
		}
		if want := body; !req.Background {
			want = nil
			if cp.raw != nil {
				t.Fatalf("a copy kept the body of a request in the foreground")
			}
		} else if !bytes.Equal(cp.raw, want) {
			t.Fatalf("a background copy kept %q, want %q", cp.raw, want)
		}
		raw := req.raw
		req.raw, cp.raw = nil, nil
		if !reflect.DeepEqual(req, cp) {
			t.Fatalf("decoded from a body overwritten after:\n%+v\nwant\n%+v", cp, req)
		}
		req.raw = raw
		if req.Model == "" {
			t.Fatal("accepted a request without a model")
		}
		checkItems(t, req.Input)
		// Every engine name of a namespaced function names it alone, so
		// its calls map back.
		for name, tool := range toolNames(req.Tools) {
			for i := range req.Tools {
				if o := &req.Tools[i]; o != tool && o.EngineName() == name {
					t.Fatalf("engine name %q names %+v and %+v", name, *tool, *o)
				}
			}
		}
		for _, h := range req.HostedTools {
			if h.Index < 0 || h.Index >= len(req.ToolsRaw) {
				t.Fatalf("hosted tool %+v of %d tools", h, len(req.ToolsRaw))
			}
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
		{Type: ItemFunctionCall, ID: "fc_2", Status: "completed", CallID: "call_2", Name: "spawn_agent", Namespace: "multi_agent_v1", Arguments: `{}`},
		{Type: ItemFunctionCallOutput, ID: "fco_1", CallID: "call_1", Output: "out"},
	} {
		got, err := decodeStoredItem(encodeItem(nil, &it))
		if err != nil || got.Type != it.Type || got.ID != it.ID || got.Text() != it.Text() || got.Arguments != it.Arguments || got.Output != it.Output || got.Namespace != it.Namespace || len(got.Content) != len(it.Content) {
			t.Errorf("round trip of %+v: %+v, %v", it, got, err)
		}
	}
	if _, err := decodeStoredItem([]byte{itemCodecV1, 200}); err == nil {
		t.Error("accepted a truncated item")
	}
}

// codexRequest is a request as the Codex CLI sends it with
// wire_api = "responses": store:false and the whole input every turn,
// client_metadata, a namespace tool, a hosted web_search tool, reasoning
// with encrypted content asked for, and its thread as prompt_cache_key.
const codexRequest = `{
  "model": "m",
  "instructions": "You are Codex, a coding agent.",
  "input": [
    {"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions instructions>"}]},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"list the files"}]},
    {"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"ls\"}","call_id":"call_1"},
    {"type":"function_call_output","call_id":"call_1","output":"a.go\nb.go"},
    {"type":"function_call","name":"spawn_agent","namespace":"multi_agent_v1","arguments":"{}","call_id":"call_2"},
    {"type":"function_call_output","call_id":"call_2","output":"spawned"},
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Two files."}]}
  ],
  "tools": [
    {"type":"function","name":"exec_command","description":"Run a command","strict":false,"parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}},
    {"type":"namespace","name":"multi_agent_v1","description":"Tools in the multi_agent_v1 namespace.","tools":[
      {"type":"function","name":"spawn_agent","description":"Start a sub-agent","strict":false,"parameters":{"type":"object","properties":{"task":{"type":"string"}}}},
      {"type":"function","name":"wait_agent","description":"Wait for a sub-agent","strict":false,"parameters":{"type":"object","properties":{}}}
    ]},
    {"type":"web_search","external_web_access":false}
  ],
  "tool_choice": "auto",
  "parallel_tool_calls": false,
  "reasoning": {"effort":"medium","summary":"auto"},
  "store": false,
  "stream": true,
  "include": ["reasoning.encrypted_content"],
  "prompt_cache_key": "019a-thread",
  "text": {"verbosity":"low"},
  "client_metadata": {"x-codex-installation-id":"inst-1"}
}`

// TestNamespaceTools: a namespace tool's functions reach the engine as
// one flat list, and calls made earlier in the conversation are rendered
// with the same flat names.
func TestNamespaceTools(t *testing.T) {
	req := mustDecode(t, codexRequest)
	if len(req.Tools) != 3 || len(req.HostedTools) != 1 || len(req.ToolsRaw) != 3 {
		t.Fatalf("tools %+v, hosted %+v, raw %d", req.Tools, req.HostedTools, len(req.ToolsRaw))
	}
	if h := req.HostedTools[0]; h.Index != 2 || h.Type != "web_search" {
		t.Errorf("hosted tool %+v", h)
	}
	body, p, err := renderChat(req, req.Input)
	if err != nil {
		t.Fatal(err)
	}
	checkPrompt(t, body, p)
	var sent chatRequest
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range sent.Tools {
		names = append(names, tool.Function.Name)
	}
	if want := []string{"exec_command", "multi_agent_v1__spawn_agent", "multi_agent_v1__wait_agent"}; !slices.Equal(names, want) {
		t.Errorf("engine tools %v, want %v (the hosted tool left out)", names, want)
	}
	var calls []string
	for _, m := range sent.Messages {
		for _, c := range m.ToolCalls {
			calls = append(calls, c.Function.Name)
		}
	}
	if want := []string{"exec_command", "multi_agent_v1__spawn_agent"}; !slices.Equal(calls, want) {
		t.Errorf("history calls %v, want %v", calls, want)
	}
	if string(sent.ToolChoice) != `"auto"` || sent.PromptCacheKey != "019a-thread" {
		t.Errorf("tool choice %s, prompt cache key %q", sent.ToolChoice, sent.PromptCacheKey)
	}
	if engineName("mcp__fs__", "read") != "mcp__fs__read" || engineName("", "read") != "read" {
		t.Error("engineName")
	}
}

// TestToolChoiceForEngine: each form of tool_choice as the engine is told
// it, names resolved to the engine's.
func TestToolChoiceForEngine(t *testing.T) {
	const tools = `"tools":[{"type":"function","name":"f"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"g"}]},{"type":"web_search"}]`
	for _, tc := range []struct {
		name, choice string
		want         string
		engineTools  []string
	}{
		{"absent", ``, ``, []string{"f", "ns__g"}},
		{"mode", `"required"`, `"required"`, []string{"f", "ns__g"}},
		{"none", `"none"`, `"none"`, []string{"f", "ns__g"}},
		{"function", `{"type":"function","name":"f"}`, `{"function":{"name":"f"},"type":"function"}`, []string{"f", "ns__g"}},
		{"namespaced function by its name", `{"type":"function","name":"g"}`, `{"function":{"name":"ns__g"},"type":"function"}`, []string{"f", "ns__g"}},
		{"allowed tools", `{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"g"},{"type":"web_search"}]}`, `"required"`, []string{"ns__g"}},
		{"only hosted tools allowed", `{"type":"allowed_tools","mode":"required","tools":[{"type":"web_search"}]}`, ``, nil},
		{"a hosted tool forced", `{"type":"web_search_preview"}`, ``, []string{"f", "ns__g"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"m","input":"x",` + tools
			if tc.choice != "" {
				body += `,"tool_choice":` + tc.choice
			}
			req := mustDecode(t, body+"}")
			b, p, err := renderChat(req, req.Input)
			if err != nil {
				t.Fatal(err)
			}
			checkPrompt(t, b, p)
			var sent chatRequest
			json.Unmarshal(b, &sent)
			if string(sent.ToolChoice) != tc.want {
				t.Errorf("engine tool_choice %s, want %s", sent.ToolChoice, tc.want)
			}
			var names []string
			for _, tool := range sent.Tools {
				names = append(names, tool.Function.Name)
			}
			if !slices.Equal(names, tc.engineTools) {
				t.Errorf("engine tools %v, want %v", names, tc.engineTools)
			}
		})
	}
}

// TestDecodeSDKRequest: every request field the official SDK can set is
// accepted, as the SDK encodes it.
func TestDecodeSDKRequest(t *testing.T) {
	params := oairesponses.ResponseNewParams{
		Model:                "m",
		Input:                oairesponses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
		Background:           openai.Bool(false),
		Instructions:         openai.String("be brief"),
		MaxOutputTokens:      openai.Int(64),
		MaxToolCalls:         openai.Int(2),
		ParallelToolCalls:    openai.Bool(true),
		PromptCacheKey:       openai.String("k"),
		SafetyIdentifier:     openai.String("user-hash"),
		Store:                openai.Bool(true),
		Temperature:          openai.Float(0.2),
		TopLogprobs:          openai.Int(3),
		TopP:                 openai.Float(0.9),
		User:                 openai.String("u"),
		ContextManagement:    []oairesponses.ResponseNewParamsContextManagement{{Type: "compaction", CompactThreshold: openai.Int(20000)}},
		Include:              []oairesponses.ResponseIncludable{oairesponses.ResponseIncludableReasoningEncryptedContent},
		Metadata:             map[string]string{"a": "b"},
		Moderation:           oairesponses.ResponseNewParamsModeration{Model: "omni-moderation-latest"},
		Prompt:               oairesponses.ResponsePromptParam{ID: "pmpt_1", Version: openai.String("3")},
		PromptCacheRetention: oairesponses.ResponseNewParamsPromptCacheRetention24h,
		ServiceTier:          oairesponses.ResponseNewParamsServiceTierFlex,
		StreamOptions:        oairesponses.ResponseNewParamsStreamOptions{IncludeObfuscation: openai.Bool(false)},
		Truncation:           oairesponses.ResponseNewParamsTruncationAuto,
		AccessPrograms:       oairesponses.ResponseNewParamsAccessPrograms{Cyber: "standard"},
		Image:                oairesponses.ResponseNewParamsImage{ContextCompression: "auto"},
		PromptCacheOptions:   oairesponses.ResponseNewParamsPromptCacheOptions{Mode: "implicit", Ttl: "30m"},
		Reasoning:            shared.ReasoningParam{Effort: shared.ReasoningEffortLow, Summary: shared.ReasoningSummaryAuto},
		Text:                 oairesponses.ResponseTextConfigParam{Verbosity: oairesponses.ResponseTextConfigVerbosityLow},
		ToolChoice:           oairesponses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(oairesponses.ToolChoiceOptionsAuto)},
		Tools: []oairesponses.ToolUnionParam{
			{OfFunction: &oairesponses.FunctionToolParam{Name: "f", Parameters: map[string]any{"type": "object"}, Strict: openai.Bool(true)}},
			{OfNamespace: &oairesponses.NamespaceToolParam{Name: "crm", Description: "CRM tools", Tools: []oairesponses.NamespaceToolToolUnionParam{
				{OfFunction: &oairesponses.NamespaceToolToolFunctionParam{Name: "lookup", Parameters: map[string]any{"type": "object"}}},
			}}},
			{OfWebSearch: &oairesponses.WebSearchToolParam{Type: oairesponses.WebSearchToolTypeWebSearch}},
			{OfFileSearch: &oairesponses.FileSearchToolParam{VectorStoreIDs: []string{"vs_1"}}},
			{OfCodeInterpreter: &oairesponses.ToolCodeInterpreterParam{Container: oairesponses.ToolCodeInterpreterContainerUnionParam{OfString: openai.String("auto")}}},
			{OfImageGeneration: &oairesponses.ToolImageGenerationParam{}},
			{OfLocalShell: &oairesponses.ToolLocalShellParam{}},
		},
	}
	body, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeCreateRequest(body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if req.MaxToolCalls == nil || *req.MaxToolCalls != 2 || req.TopLogprobs == nil || *req.TopLogprobs != 3 ||
		req.PromptCacheRetention == nil || *req.PromptCacheRetention != "24h" || len(req.Prompt) == 0 {
		t.Errorf("echoed fields not kept: %+v", req)
	}
	if len(req.Tools) != 2 || req.Tools[1].EngineName() != "crm__lookup" || len(req.HostedTools) != 5 {
		t.Errorf("tools %+v, hosted %+v", req.Tools, req.HostedTools)
	}
}

// agentRequestBody is an agent's turn as a client without
// previous_response_id sends it: a long system prompt, tool schemas, and
// rounds of tool calls with their outputs.
func agentRequestBody(rounds int) []byte {
	var tools []map[string]any
	for i := range 12 {
		tools = append(tools, map[string]any{
			"type": "function", "name": fmt.Sprintf("tool_%d", i), "description": strings.Repeat("Runs a step of the build. ", 8),
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"path": map[string]any{"type": "string", "description": "the file"}, "line": map[string]any{"type": "integer"},
			}, "required": []string{"path"}},
		})
	}
	input := []map[string]any{
		{"role": "system", "content": strings.Repeat("You are a careful coding agent working in a large repository. ", 120)},
		{"role": "user", "content": "Fix the failing test in the parser and explain the change."},
	}
	for i := range rounds {
		call := fmt.Sprintf("call_%d", i)
		input = append(input,
			map[string]any{"type": "function_call", "call_id": call, "name": "tool_1", "arguments": `{"path":"parser/lex.go","line":120}`},
			map[string]any{"type": "function_call_output", "call_id": call, "output": strings.Repeat("func lex(s string) []token {\n\treturn nil\n}\n", 40)},
		)
	}
	b, err := json.Marshal(map[string]any{"model": "m", "stream": true, "store": true, "input": input, "tools": tools, "tool_choice": "auto", "max_output_tokens": 512})
	if err != nil {
		panic(err)
	}
	return b
}

func BenchmarkDecodeCreateRequest(b *testing.B) {
	for _, bc := range []struct {
		name string
		body []byte
	}{{"codex", []byte(codexRequest)}, {"agent-8", agentRequestBody(8)}, {"agent-64", agentRequestBody(64)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeCreateRequest(bc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
