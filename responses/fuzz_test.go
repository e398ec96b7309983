package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// checkAPIError fails t unless err is an invalid-request *apierror.Error
// with a message.
func checkAPIError(t *testing.T, err error) {
	t.Helper()
	var e *apierror.Error
	if !errors.As(err, &e) || e.Message == "" || e.Status != 400 || !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("not a 400 with a message: %#v", err)
	}
}

// checkItems fails t unless every decoded item survives the store: its
// stored form decodes to it, and its JSON encodes (references aside,
// which are resolved before anything is stored).
func checkItems(t *testing.T, items []wire.Item) {
	t.Helper()
	for i := range items {
		it := &items[i]
		if it.Type == wire.ItemReference {
			if it.ID == "" {
				t.Fatal("a reference without an id")
			}
			continue
		}
		got, err := decodeStoredItem(encodeItem(nil, it))
		if err != nil {
			t.Fatalf("stored form of %+v: %v", it, err)
		}
		if got.Type != it.Type || got.ID != it.ID || got.Namespace != it.Namespace || got.Arguments != it.Arguments ||
			got.Output != it.Output || got.Text() != it.Text() || len(got.Content) != len(it.Content) ||
			got.EncryptedContent != it.EncryptedContent || len(got.Summary) != len(it.Summary) || reasoningText(&got) != reasoningText(it) ||
			got.ServerLabel != it.ServerLabel || got.Error != it.Error || got.ApprovalRequestID != it.ApprovalRequestID || (got.Approve == nil) != (it.Approve == nil) {
			t.Fatalf("stored form of %+v reads back as %+v", it, got)
		}
		if _, err := json.Marshal(it); err != nil {
			t.Fatalf("encoding %+v: %v", it, err)
		}
	}
}

// FuzzConversationBody: the bodies of POST /v1/conversations (items and
// metadata), POST /v1/conversations/{id} (metadata) and POST
// /v1/conversations/{id}/items (items) decode to items the store keeps,
// or to an OpenAI-shaped 400.
func FuzzConversationBody(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"metadata":{"a":"b"}}`, `{"metadata":null}`, `{"items":null}`,
		`{"items":[{"type":"message","role":"user","content":"hi"}],"metadata":{"topic":"x"}}`,
		`{"items":[{"role":"assistant","phase":"final_answer","content":[{"type":"output_text","text":"a","annotations":[]}]}]}`,
		`{"items":[{"type":"function_call","call_id":"c","name":"f","namespace":"ns","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"o"}]}]}`,
		`{"items":[{"type":"item_reference","id":"msg_1"}]}`,
		`{"items":[{"role":"user","content":[{"type":"input_image"}]}]}`,
		`{"items":{}}`, `{"metadata":{"k":1}}`, `{"extra":1}`, `[]`, ``, `{"items":[null]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, allowed := range [][]string{{"items", "metadata"}, {"metadata"}, {"items"}} {
			items, metadata, _, err := wire.DecodeConversationBody(body, allowed...)
			if err != nil {
				checkAPIError(t, err)
				continue
			}
			if len(items) > wire.MaxConversationItems || len(metadata) > wire.MaxMetadataKeys {
				t.Fatalf("%d items, %d metadata keys accepted", len(items), len(metadata))
			}
			if len(allowed) == 1 && allowed[0] == "metadata" && len(items) > 0 {
				t.Fatal("an update took items")
			}
			checkItems(t, items)
		}
	})
}

// FuzzStoredItem: whatever bytes the store holds, reading them as an item
// fails cleanly or gives an item whose stored form reads back the same.
func FuzzStoredItem(f *testing.F) {
	for _, it := range []wire.Item{
		{Type: wire.ItemMessage, ID: "msg_1", Status: "completed", Role: "user", Content: []wire.ContentPart{{Type: "input_text", Text: "hi"}}},
		{Type: wire.ItemFunctionCall, ID: "fc_1", CallID: "c", Name: "f", Namespace: "ns", Arguments: "{}"},
		{Type: wire.ItemReasoning, ID: "rs_1", Summary: []wire.ContentPart{{Type: wire.PartSummary, Text: "s"}}, EncryptedContent: "AQ"},
		{Type: wire.ItemCompaction, ID: "cmp_1", Content: []wire.ContentPart{{Type: wire.PartSummary, Text: "sum"}}, EncryptedContent: "AQ"},
		{Type: wire.ItemMCPCall, ID: "mcp_1", ServerLabel: "s", Name: "add", Arguments: "{}", Error: "boom", ApprovalRequestID: "mcpr_1"},
		{Type: wire.ItemMCPApprovalResponse, ID: "mcpa_1", ApprovalRequestID: "mcpr_1", Approve: &approved},
	} {
		f.Add(encodeItem(nil, &it))
	}
	f.Add([]byte{itemCodecV2, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		it, err := decodeStoredItem(b)
		if err != nil {
			return
		}
		again, err := decodeStoredItem(encodeItem(nil, &it))
		if err != nil || again.Type != it.Type || again.Namespace != it.Namespace || again.Text() != it.Text() || len(again.Content) != len(it.Content) {
			t.Fatalf("%+v re-read as %+v, %v", it, again, err)
		}
	})
}

// FuzzDecodeCompactRequest: a POST /v1/responses/compact body decodes to a
// stateless request whose items the store keeps, or to an OpenAI-shaped
// 400.
func FuzzDecodeCompactRequest(f *testing.F) {
	fuzzStateless(f, wire.DecodeCompactRequest,
		`{"model":"m","input":"hi"}`, `{"model":"m","previous_response_id":"resp_1"}`, `{"model":"m"}`,
		`{"model":"m","input":[{"role":"user","content":"a"},{"type":"compaction","id":"cmp_1","encrypted_content":"AQ"}],"instructions":"x","prompt_cache_key":"k","service_tier":"flex"}`,
		`{"model":"m","input":"x","stream":true}`, `{"model":"m","input":"x","store":true}`, `{"model":"m","input":null,"previous_response_id":null}`,
		`[]`, ``, `{"model":1}`)
}

// FuzzDecodeInputTokensRequest: a POST /v1/responses/input_tokens body
// decodes to a stateless, unstreamed request for a model, or to an
// OpenAI-shaped 400.
func FuzzDecodeInputTokensRequest(f *testing.F) {
	fuzzStateless(f, wire.DecodeInputTokensRequest,
		`{"model":"m","input":"hi"}`, `{"model":"m","previous_response_id":"resp_1"}`, `{"model":"m","conversation":"conv_1"}`, `{"model":"m"}`,
		`{"model":"m","input":[{"role":"user","content":"a"}],"instructions":"x","tools":[{"type":"function","name":"f","parameters":{}}],"tool_choice":"auto","truncation":"auto"}`,
		`{"model":"m","input":"x","stream":true}`, `{"model":"m","input":"x","store":true}`, `{"model":"m","input":null}`,
		`[]`, ``, `{"model":1}`, `{"input":"x"}`)
}

// fuzzStateless fuzzes a decoder of stateless requests from seeds: a body
// decodes to an unstored, unstreamed request for a model whose items the
// store keeps, or to an OpenAI-shaped 400.
func fuzzStateless(f *testing.F, decode func([]byte) (*wire.CreateRequest, error), seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decode(body)
		if err != nil {
			checkAPIError(t, err)
			return
		}
		if req.Store || req.Stream || req.Model == "" {
			t.Fatalf("decoded %+v", req)
		}
		checkItems(t, req.Input)
	})
}

// FuzzChatBody: the engine's body written by hand is byte for byte what
// json.Marshal makes of the request, whatever its strings hold, and its
// length is known before it is written.
func FuzzChatBody(f *testing.F) {
	f.Add("m", "user", "hi", "", "", "", "", false, true)
	f.Add(`a"messages":null`, "assistant", "<b>&\u2028</b>\n", "think\x00", "c1", "ls", `{"x":"\xff"}`, true, false)
	f.Fuzz(func(t *testing.T, model, role, content, reasoning, callID, name, args string, withReasoning, nilContent bool) {
		msg := chatMessage{Role: role, Content: &content, ToolCallID: callID}
		if nilContent {
			msg.Content = nil
		}
		if withReasoning {
			msg.ReasoningContent = &reasoning
		}
		if name != "" {
			msg.ToolCalls = []chatToolCall{{ID: callID, Type: "function", Function: chatFunction{Name: name, Arguments: args}}, {ID: "2", Type: "function"}}
		}
		max := 5
		c := chatRequest{Model: model, Stream: true, Messages: []chatMessage{{Role: "system", Content: &reasoning}, msg}, MaxTokens: &max,
			Tools: []chatTool{{Type: "function", Function: chatToolFunction{Name: name}}}}
		got, err := chatBody(&c)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("chatBody\n%s\njson.Marshal\n%s", got, want)
		}
		for _, s := range []string{model, content, reasoning, args} {
			if n, want := jsonStringLen(s), len(appendJSONString(nil, s)); n != want {
				t.Fatalf("jsonStringLen(%q) = %d, want %d", s, n, want)
			}
		}
		if n, want := messageLen(&msg), len(appendMessage(nil, &msg)); n != want {
			t.Fatalf("messageLen %d, want %d", n, want)
		}
	})
}

// chatBody is chatBodyFrom's body with nothing rendered before.
func chatBody(c *chatRequest) ([]byte, error) {
	b, _, _, err := chatBodyFrom(c, nil, 0, 0)
	return b, err
}
