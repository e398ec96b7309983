package responses

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// codexRequest is a request as the Codex CLI sends it (wire's testdata).
var codexRequest = func() string {
	b, err := os.ReadFile("wire/testdata/codex_request.json")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

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
		req, err := wire.DecodeCreateRequest(body)
		if err != nil {
			checkAPIError(t, err)
			return
		}
		// A copy decoded from a body overwritten after is the same
		// request: it keeps nothing of the body but a background's.
		staged := bytes.Clone(body)
		cp, err := wire.DecodeCreateRequestCopy(staged)
		if err != nil {
			t.Fatalf("decoded once, refused as a copy: %v", err)
		}
		for i := range staged {
			staged[i] = 'x'
		}
		if want := body; !req.Background {
			want = nil
			if cp.Body != nil {
				t.Fatalf("a copy kept the body of a request in the foreground")
			}
		} else if !bytes.Equal(cp.Body, want) {
			t.Fatalf("a background copy kept %q, want %q", cp.Body, want)
		}
		raw := req.Body
		req.Body, cp.Body = nil, nil
		if !reflect.DeepEqual(req, cp) {
			t.Fatalf("decoded from a body overwritten after:\n%+v\nwant\n%+v", cp, req)
		}
		req.Body = raw
		if req.Model == "" {
			t.Fatal("accepted a request without a model")
		}
		checkItems(t, req.Input)
		// Every engine name of a namespaced function names it alone, so
		// its calls map back.
		for name, tool := range wire.ToolNames(req.Tools) {
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
	for _, it := range []wire.Item{
		{Type: wire.ItemMessage, ID: "msg_1", Status: "completed", Role: "user", Content: []wire.ContentPart{{Type: "input_text", Text: "héllo"}, {Type: "input_text", Text: ""}}},
		{Type: wire.ItemFunctionCall, ID: "fc_1", Status: "completed", CallID: "call_1", Name: "f", Arguments: `{"a":1}`},
		{Type: wire.ItemFunctionCall, ID: "fc_2", Status: "completed", CallID: "call_2", Name: "spawn_agent", Namespace: "multi_agent_v1", Arguments: `{}`},
		{Type: wire.ItemFunctionCallOutput, ID: "fco_1", CallID: "call_1", Output: "out"},
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
	if wire.EngineName("mcp__fs__", "read") != "mcp__fs__read" || wire.EngineName("", "read") != "read" {
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
