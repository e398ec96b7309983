package api_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
)

// TestSDKCustomTool: a custom tool (freeform input) reaches the engine
// as a function of one string parameter, its grammar described; the
// engine's call comes back as a custom_tool_call with the input as text,
// streamed with the custom tool input events; a stateless next turn with
// the call and its output shows the engine the call and the result.
func TestSDKCustomTool(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	first := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("patch the file", responses.EasyInputMessageRoleUser)}
	params := responses.ResponseNewParams{
		Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: first}, Store: openai.Bool(false),
		Tools: []responses.ToolUnionParam{{OfCustom: &responses.CustomToolParam{Name: "apply_patch", Description: openai.String("Apply a patch."),
			Format: shared.CustomToolInputFormatUnionParam{OfGrammar: &shared.CustomToolInputFormatGrammarParam{Syntax: "lark", Definition: `start: "*** Begin Patch" /.+/`}}}}},
	}
	evs, r := streamed(t, st, params)
	var body struct {
		Tools []struct {
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
	}
	json.Unmarshal([]byte(st.Engine.Bodies[0]), &body)
	if len(body.Tools) != 1 || body.Tools[0].Function.Name != "apply_patch" || !strings.Contains(body.Tools[0].Function.Description, "lark grammar") ||
		!strings.Contains(string(body.Tools[0].Function.Parameters), `"input"`) {
		t.Fatalf("engine tools %+v", body.Tools)
	}
	if len(r.Output) != 1 || r.Output[0].Type != "custom_tool_call" {
		t.Fatalf("output %s", r.RawJSON())
	}
	call := r.Output[0].AsCustomToolCall()
	if call.Name != "apply_patch" || call.Input == "" || strings.HasPrefix(call.Input, "{") || call.CallID == "" || !strings.HasPrefix(call.ID, "ctc_") {
		t.Fatalf("call %s", r.Output[0].RawJSON())
	}
	types := eventTypes(evs)
	for _, typ := range []string{"response.custom_tool_call_input.delta", "response.custom_tool_call_input.done"} {
		if !slices.Contains(types, typ) {
			t.Errorf("no %s in %v", typ, types)
		}
	}
	if slices.Contains(types, "response.function_call_arguments.delta") {
		t.Errorf("function call events for a custom tool: %v", types)
	}

	cp := call.ToParam()
	next := append(slices.Clone(first), responses.ResponseInputItemUnionParam{OfCustomToolCall: &cp},
		responses.ResponseInputItemParamOfCustomToolCallOutput(call.CallID, "Done: 1 file changed."))
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: next}
	_, r2 := streamed(t, st, params)
	if r2.Output[0].Type != "message" {
		t.Fatalf("second output %s", r2.RawJSON())
	}
	msgs := engineMessages(t, st)
	want, _ := json.Marshal(map[string]string{"input": call.Input})
	calls, _ := msgs[1]["tool_calls"].([]any)
	if len(msgs) != 3 || len(calls) != 1 || calls[0].(map[string]any)["function"].(map[string]any)["arguments"] != string(want) ||
		msgs[2]["role"] != "tool" || msgs[2]["content"] != "Done: 1 file changed." {
		t.Fatalf("engine messages %v", msgs)
	}
}
