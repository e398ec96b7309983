package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
)

// streamed runs a streamed response and returns its event types and the
// response it ended with.
func streamed(t *testing.T, st *gatewaytest.Stack, params responses.ResponseNewParams) ([]responses.ResponseStreamEventUnion, responses.Response) {
	t.Helper()
	stream := st.Client.Responses.NewStreaming(context.Background(), params)
	var evs []responses.ResponseStreamEventUnion
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		evs = append(evs, ev)
		if ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if final.ID == "" {
		t.Fatalf("no response.completed among %d events", len(evs))
	}
	return evs, final
}

func eventTypes(evs []responses.ResponseStreamEventUnion) []string {
	types := make([]string, len(evs))
	for i, ev := range evs {
		types[i] = ev.Type
	}
	return types
}

// engineMessages are the chat messages of the engine's last request.
func engineMessages(t *testing.T, st *gatewaytest.Stack) []map[string]any {
	t.Helper()
	var body struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal([]byte(st.Engine.Last()), &body); err != nil {
		t.Fatal(err)
	}
	return body.Messages
}

// TestSDKReasoningSummaryStateless: a reasoning engine's thinking, asked
// for as a summary with its encrypted content (as the Codex CLI asks,
// store:false), streams as reasoning summary events and ends as a
// reasoning item; sent back as input on the next stateless turn, with
// the ids the client got, the engine sees that thinking again as the
// assistant turn's reasoning_content.
func TestSDKReasoningSummaryStateless(t *testing.T) {
	st := gatewaytest.NewStackSim(t, sim.Config{Reasoning: true}, tpresponses.Config{}, mount)
	first := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("plan the release", responses.EasyInputMessageRoleUser)}
	params := responses.ResponseNewParams{
		Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: first},
		Store:     openai.Bool(false),
		Reasoning: shared.ReasoningParam{Effort: shared.ReasoningEffortMedium, Summary: shared.ReasoningSummaryAuto},
		Include:   []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
	}
	evs, final := streamed(t, st, params)
	types := eventTypes(evs)
	want := []string{"response.output_item.added", "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta"}
	if i := slices.Index(types, want[0]); i < 0 || !slices.Equal(types[i:i+3], want) {
		t.Fatalf("events %v: want %v first", types, want)
	}
	for _, typ := range []string{"response.reasoning_summary_text.done", "response.reasoning_summary_part.done"} {
		if !slices.Contains(types, typ) {
			t.Errorf("no %s in %v", typ, types)
		}
	}
	if slices.Contains(types, "response.reasoning_text.delta") {
		t.Errorf("reasoning text events with a summary asked for: %v", types)
	}
	var deltas strings.Builder
	var doneText string
	for _, ev := range evs {
		switch ev.Type {
		case "response.reasoning_summary_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.reasoning_summary_text.done":
			doneText = ev.Text
		}
	}
	if len(final.Output) != 2 || final.Output[0].Type != "reasoning" || final.Output[1].Type != "message" {
		t.Fatalf("output %s", final.RawJSON())
	}
	rs := final.Output[0].AsReasoning()
	if len(rs.Summary) != 1 || rs.Summary[0].Text == "" || rs.Summary[0].Text != deltas.String() || doneText != deltas.String() {
		t.Fatalf("summary %+v; deltas %q, done %q", rs.Summary, deltas.String(), doneText)
	}
	if rs.EncryptedContent == "" || strings.Contains(rs.EncryptedContent, rs.Summary[0].Text) {
		t.Fatalf("encrypted_content %q", rs.EncryptedContent)
	}
	if final.Usage.OutputTokensDetails.ReasoningTokens == 0 {
		t.Error("no reasoning tokens in usage")
	}

	// The next turn, stateless: the whole conversation as input, the
	// reasoning item as the client got it (its summary dropped, as a
	// client may: the encrypted content is what counts).
	thinking := rs.Summary[0].Text
	rp := rs.ToParam()
	rp.Summary = []responses.ResponseReasoningItemSummaryParam{}
	answer := final.Output[1].AsMessage().ToParam()
	next := append(slices.Clone(first),
		responses.ResponseInputItemUnionParam{OfReasoning: &rp},
		responses.ResponseInputItemUnionParam{OfOutputMessage: &answer},
		responses.ResponseInputItemParamOfMessage("now ship it", responses.EasyInputMessageRoleUser))
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: next}
	_, final2 := streamed(t, st, params)
	msgs := engineMessages(t, st)
	if len(msgs) != 3 || msgs[1]["role"] != "assistant" || msgs[1]["reasoning_content"] != thinking {
		t.Fatalf("engine messages %v: want the assistant turn with reasoning_content %q", msgs, thinking)
	}
	if final2.Output[0].Type != "reasoning" || final2.Output[0].AsReasoning().EncryptedContent == rs.EncryptedContent {
		t.Fatalf("second output %s", final2.RawJSON())
	}
}

// TestSDKReasoningText: without reasoning.summary the thinking streams as
// reasoning text, as OpenAI serves its open models, and a function call
// after it carries it back on the next stateless turn.
func TestSDKReasoningText(t *testing.T) {
	st := gatewaytest.NewStackSim(t, sim.Config{Reasoning: true}, tpresponses.Config{}, mount)
	first := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("list the files", responses.EasyInputMessageRoleUser)}
	params := responses.ResponseNewParams{
		Model: testModel, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: first},
		Store:   openai.Bool(false),
		Include: []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "exec_command",
			Parameters: map[string]any{"type": "object", "properties": map[string]any{"cmd": map[string]any{"type": "string"}}, "required": []string{"cmd"}}}}},
	}
	evs, final := streamed(t, st, params)
	types := eventTypes(evs)
	for _, typ := range []string{"response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.done"} {
		if !slices.Contains(types, typ) {
			t.Errorf("no %s in %v", typ, types)
		}
	}
	if slices.Contains(types, "response.reasoning_summary_text.delta") {
		t.Errorf("summary events with no summary asked for: %v", types)
	}
	if len(final.Output) != 2 || final.Output[0].Type != "reasoning" || final.Output[1].Type != "function_call" {
		t.Fatalf("output %s", final.RawJSON())
	}
	rs := final.Output[0].AsReasoning()
	if len(rs.Content) != 1 || rs.Content[0].Type != "reasoning_text" || rs.Content[0].Text == "" || len(rs.Summary) != 0 {
		t.Fatalf("reasoning item %s", rs.RawJSON())
	}
	call := final.Output[1].AsFunctionCall()
	rp, cp := rs.ToParam(), call.ToParam()
	out := responses.ResponseInputItemParamOfFunctionCallOutput("main.go\ngo.mod")
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	next := append(slices.Clone(first),
		responses.ResponseInputItemUnionParam{OfReasoning: &rp},
		responses.ResponseInputItemUnionParam{OfFunctionCall: &cp}, out)
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: next}
	streamed(t, st, params)
	msgs := engineMessages(t, st)
	if len(msgs) != 3 || msgs[1]["reasoning_content"] != rs.Content[0].Text || msgs[1]["tool_calls"] == nil || msgs[2]["role"] != "tool" {
		t.Fatalf("engine messages %v", msgs)
	}
}

// TestSDKReasoningTampered: encrypted content that turnpike did not issue
// as it is sent (altered, made up) is a 400 naming the item, before
// anything reaches the engine.
func TestSDKReasoningTampered(t *testing.T) {
	st := gatewaytest.NewStackSim(t, sim.Config{Reasoning: true}, tpresponses.Config{}, mount)
	params := responses.ResponseNewParams{
		Model: testModel, Input: gatewaytest.Text("think"), Store: openai.Bool(false),
		Include: []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
	}
	r, err := st.Client.Responses.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	blob := r.Output[0].AsReasoning().EncryptedContent
	altered := []byte(blob)
	altered[len(altered)/2] ^= 'A' ^ 'B'
	if altered[len(altered)/2] == blob[len(blob)/2] {
		altered[len(altered)/2] = 'C'
	}
	for name, enc := range map[string]string{"altered": string(altered), "made up": "gAAAAABoBfake"} {
		t.Run(name, func(t *testing.T) {
			before := len(st.Engine.Bodies)
			item := responses.ResponseReasoningItemParam{ID: "rs_client_1", Summary: []responses.ResponseReasoningItemSummaryParam{}, EncryptedContent: openai.String(enc)}
			params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
				responses.ResponseInputItemParamOfMessage("hi", responses.EasyInputMessageRoleUser),
				{OfReasoning: &item},
			}}
			_, err := st.Client.Responses.New(context.Background(), params)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "input[1].encrypted_content" || apiErr.Code != "invalid_encrypted_content" {
				t.Fatalf("err %v", err)
			}
			if !strings.Contains(apiErr.Message, "rs_client_1") {
				t.Errorf("message does not name the item: %s", apiErr.Message)
			}
			st.Engine.Mu.Lock()
			after := len(st.Engine.Bodies)
			st.Engine.Mu.Unlock()
			if after != before {
				t.Error("the engine was asked")
			}
		})
	}
}
