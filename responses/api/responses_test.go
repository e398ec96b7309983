package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
)

func TestSDKCreateAndChain(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	r1, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, Input: gatewaytest.Text("The secret word is pelican."), Instructions: openai.String("Answer briefly."),
		MaxOutputTokens: openai.Int(16), Metadata: map[string]string{"k": "v"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Status != responses.ResponseStatusCompleted || r1.OutputText() == "" || !strings.HasPrefix(r1.ID, "resp_") {
		t.Fatalf("first response: status %s, text %q, id %s", r1.Status, r1.OutputText(), r1.ID)
	}
	if r1.Usage.InputTokens == 0 || r1.Usage.OutputTokens == 0 || r1.Usage.TotalTokens != r1.Usage.InputTokens+r1.Usage.OutputTokens {
		t.Errorf("usage %+v", r1.Usage)
	}
	if r1.Metadata["k"] != "v" || r1.Instructions.OfString != "Answer briefly." || r1.Output[0].ID == "" {
		t.Errorf("echoed fields: metadata %v, instructions %+v", r1.Metadata, r1.Instructions)
	}

	r2, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, Input: gatewaytest.Text("What was the secret word?"), PreviousResponseID: openai.String(r1.ID), MaxOutputTokens: openai.Int(16),
	})
	if err != nil {
		t.Fatal(err)
	}
	sent := st.Engine.Last()
	for _, want := range []string{"The secret word is pelican.", jsonString(r1.OutputText()), "What was the secret word?"} {
		if !strings.Contains(sent, want) {
			t.Errorf("the engine did not get %q for the second turn:\n%s", want, sent)
		}
	}
	if r2.PreviousResponseID != r1.ID {
		t.Errorf("previous_response_id echoed as %q", r2.PreviousResponseID)
	}
	got, err := st.Client.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != r2.OutputText() {
		t.Errorf("get: %v, text %q want %q", err, got.OutputText(), r2.OutputText())
	}
}

// jsonString is s as it appears inside a JSON string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func TestSDKStreamEvents(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	stream := st.Client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: testModel, Input: gatewaytest.Text("Tell me a story."), MaxOutputTokens: openai.Int(8),
	})
	var types []string
	var deltas strings.Builder
	var final responses.Response
	seq := int64(-1)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq+1 {
			t.Errorf("event %s has sequence_number %d after %d", ev.Type, ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done"}
	if len(types) != len(want)+1 || strings.Join(types[:len(want)], ",") != strings.Join(want, ",") {
		t.Fatalf("event types:\n  %v\nwant\n  %v then completed or incomplete", types, want)
	}
	if last := types[len(types)-1]; last != "response.incomplete" && last != "response.completed" {
		t.Errorf("last event %s", last)
	}
	if final.OutputText() != deltas.String() || final.ID == "" {
		t.Errorf("final text %q, deltas %q", final.OutputText(), deltas.String())
	}
	if final.Status == responses.ResponseStatusIncomplete && final.IncompleteDetails.Reason != "max_output_tokens" {
		t.Errorf("incomplete details %+v", final.IncompleteDetails)
	}
	// Stored before it was announced.
	got, err := st.Client.Responses.Get(context.Background(), final.ID, responses.ResponseGetParams{})
	if err != nil || got.Status != final.Status {
		t.Errorf("stored: %v %v", got, err)
	}
}

func TestSDKFunctionCalling(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{
		Name: "get_weather", Description: openai.String("Weather in a city"),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}}}
	r1, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("Weather in Paris?"), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	if len(r1.Output) != 1 || r1.Output[0].Type != "function_call" {
		t.Fatalf("first turn output: %+v", r1.Output)
	}
	call := r1.Output[0].AsFunctionCall()
	if call.Name != "get_weather" || call.CallID == "" || !strings.HasPrefix(call.ID, "fc_") || !json.Valid([]byte(call.Arguments)) {
		t.Fatalf("function call %+v", call)
	}
	out := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temperature":"21C"}`)
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	r2, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, PreviousResponseID: openai.String(r1.ID), Tools: tools, MaxOutputTokens: openai.Int(16),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r2.OutputText() == "" || r2.Output[0].Type != "message" {
		t.Fatalf("second turn output: %+v", r2.Output)
	}
	var sent struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	json.Unmarshal([]byte(st.Engine.Last()), &sent)
	m := sent.Messages
	if len(m) != 3 || m[1].Role != "assistant" || len(m[1].ToolCalls) != 1 || m[1].ToolCalls[0].ID != call.CallID ||
		m[2].Role != "tool" || m[2].ToolCallID != call.CallID {
		t.Errorf("second turn rendered as %+v", m)
	}
}

func TestSDKInputItemsPaging(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	var in responses.ResponseInputParam
	for _, s := range []string{"a", "b", "c", "d", "e"} {
		in = append(in, responses.ResponseInputItemParamOfMessage(s, responses.EasyInputMessageRoleUser))
	}
	r, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(4),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: in}})
	if err != nil {
		t.Fatal(err)
	}
	page, err := st.Client.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{Limit: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	var ids struct {
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
	}
	json.Unmarshal([]byte(page.RawJSON()), &ids)
	if len(page.Data) != 2 || !page.HasMore || ids.FirstID != page.Data[0].ID || ids.LastID != page.Data[1].ID {
		t.Fatalf("first page: %d items, has_more %v", len(page.Data), page.HasMore)
	}
	var got []string
	iter := st.Client.Responses.InputItems.ListAutoPaging(ctx, r.ID, responses.InputItemListParams{Limit: openai.Int(2)})
	for iter.Next() {
		it := iter.Current()
		got = append(got, it.AsMessage().Content[0].Text)
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "") != "edcba" {
		t.Errorf("paged (desc) through %v", got)
	}
	asc, err := st.Client.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{Order: responses.InputItemListParamsOrderAsc, Limit: openai.Int(10)})
	if err != nil || len(asc.Data) != 5 || asc.HasMore || asc.Data[0].AsMessage().Content[0].Text != "a" {
		t.Errorf("asc: %v %+v", err, asc)
	}
}

// TestInputItemsLimitOutOfRange: a limit outside 1..100 is refused with
// the value the client sent (issue 9, D5: limit=0 was reported as -1).
func TestInputItemsLimitOutOfRange(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	r, err := st.Client.Responses.New(context.Background(), responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("hi"), MaxOutputTokens: openai.Int(4)})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []string{"0", "-3", "101"} {
		t.Run(limit, func(t *testing.T) {
			resp, err := http.Get(st.Front.URL + "/v1/responses/" + r.ID + "/input_items?limit=" + limit)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			eb := gatewaytest.ReadAPIError(t, resp)
			if resp.StatusCode != http.StatusBadRequest || deref(eb.Error.Param) != "limit" || deref(eb.Error.Code) != "invalid_value" {
				t.Fatalf("limit=%s: %d param %q code %q", limit, resp.StatusCode, deref(eb.Error.Param), deref(eb.Error.Code))
			}
			if want := "but got " + limit + " instead"; !strings.Contains(eb.Error.Message, want) {
				t.Errorf("message %q does not say %q", eb.Error.Message, want)
			}
		})
	}
}

func TestSDKDelete(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	r, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("bye"), MaxOutputTokens: openai.Int(4)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Responses.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	_, err = st.Client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if err := st.Client.Responses.Delete(ctx, r.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("second delete: %v", err)
	}
}

func TestSDKBackground(t *testing.T) {
	st := gatewaytest.NewStack(t, 0.05, mount)
	ctx := context.Background()
	r, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, Input: gatewaytest.Text("Work on this in the background."), Background: openai.Bool(true), MaxOutputTokens: openai.Int(16),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != responses.ResponseStatusQueued || !r.Background {
		t.Fatalf("status %s, background %v", r.Status, r.Background)
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.Status == responses.ResponseStatusQueued || r.Status == responses.ResponseStatusInProgress {
		if time.Now().After(deadline) {
			t.Fatalf("still %s after 20s", r.Status)
		}
		time.Sleep(20 * time.Millisecond)
		if r, err = st.Client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); err != nil {
			t.Fatal(err)
		}
	}
	if r.Status != responses.ResponseStatusCompleted && r.Status != responses.ResponseStatusIncomplete || r.OutputText() == "" {
		t.Fatalf("ended %s with %q", r.Status, r.OutputText())
	}

	// Resume its event stream part-way.
	stream := st.Client.Responses.GetStreaming(ctx, r.ID, responses.ResponseGetParams{StartingAfter: openai.Int(2)})
	var first, last responses.ResponseStreamEventUnion
	n := 0
	for stream.Next() {
		if n == 0 {
			first = stream.Current()
		}
		last = stream.Current()
		n++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if first.SequenceNumber != 3 || (last.Type != "response.completed" && last.Type != "response.incomplete") {
		t.Errorf("resumed stream: first seq %d, last %s", first.SequenceNumber, last.Type)
	}

	// Cancel a long one while it runs.
	long, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, Input: gatewaytest.Text("Write at length."), Background: openai.Bool(true), MaxOutputTokens: openai.Int(20000),
	})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := st.Client.Responses.Cancel(ctx, long.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.Status != responses.ResponseStatusCancelled {
		t.Errorf("after cancel: %s", cancelled.Status)
	}
	// A foreground response cannot be cancelled.
	fg, _ := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("x"), MaxOutputTokens: openai.Int(2)})
	var apiErr *openai.Error
	if _, err := st.Client.Responses.Cancel(ctx, fg.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
		t.Errorf("cancel foreground: %v", err)
	}
}

func TestSDKConversations(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	conv, err := st.Client.Conversations.New(ctx, conversations.ConversationNewParams{
		Items:    []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage("You are terse.", responses.EasyInputMessageRoleSystem)},
		Metadata: map[string]string{"topic": "demo"},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{
		Model: testModel, Input: gatewaytest.Text("Hello there."), MaxOutputTokens: openai.Int(8),
		Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Conversation.ID != conv.ID {
		t.Errorf("conversation echoed as %q", r.Conversation.ID)
	}
	items, err := st.Client.Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc})
	if err != nil {
		t.Fatal(err)
	}
	if len(items.Data) != 3 || items.Data[1].AsMessage().Content[0].Text != "Hello there." || items.Data[2].Role != "assistant" {
		t.Fatalf("conversation items: %+v", items.Data)
	}
	added, err := st.Client.Conversations.Items.New(ctx, conv.ID, conversations.ItemNewParams{
		Items: []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage("And again.", responses.EasyInputMessageRoleUser)},
	})
	if err != nil || len(added.Data) != 1 {
		t.Fatalf("add items: %v", err)
	}
	one, err := st.Client.Conversations.Items.Get(ctx, conv.ID, added.Data[0].ID, conversations.ItemGetParams{})
	if err != nil || one.ID != added.Data[0].ID {
		t.Fatalf("get item: %v", err)
	}
	if _, err := st.Client.Conversations.Items.Delete(ctx, conv.ID, one.ID); err != nil {
		t.Fatal(err)
	}
	upd, err := st.Client.Conversations.Update(ctx, conv.ID, conversations.ConversationUpdateParams{Metadata: map[string]string{"topic": "changed"}})
	if err != nil || !strings.Contains(upd.RawJSON(), `"topic":"changed"`) {
		t.Fatalf("update: %v %+v", err, upd)
	}
	if _, err := st.Client.Conversations.Delete(ctx, conv.ID); err != nil {
		t.Fatal(err)
	}
	var apiErr *openai.Error
	if _, err := st.Client.Conversations.Get(ctx, conv.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("get after delete: %v", err)
	}
}

func TestResponsesBadInput(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	big := `{"model":"` + testModel + `","input":"` + strings.Repeat("x", 2<<20) + `"}`
	tests := []struct {
		name, body  string
		status      int
		param, code string
	}{
		{"malformed json", `{"model":`, 400, "", "invalid_json"},
		{"unknown previous response", `{"model":"` + testModel + `","input":"x","previous_response_id":"resp_nope"}`, 404, "previous_response_id", "previous_response_not_found"},
		{"wrong type", `{"model":"` + testModel + `","input":"x","temperature":"hot"}`, 400, "temperature", "invalid_type"},
		{"wrong type in an item", `{"model":"` + testModel + `","input":[{"role":"user","content":5}]}`, 400, "input[0].content", "invalid_type"},
		{"unknown parameter", `{"model":"` + testModel + `","input":"x","foo":1}`, 400, "foo", "unknown_parameter"},
		{"missing input", `{"model":"` + testModel + `"}`, 400, "input", "missing_required_parameter"},
		{"unknown model", `{"model":"nope","input":"x"}`, 404, "model", "model_not_found"},
		{"background without store", `{"model":"` + testModel + `","input":"x","background":true,"store":false}`, 400, "background", "invalid_value"},
		{"body over the limit", big, 413, "", "request_too_large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(st.Front.URL+"/v1/responses", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error *struct {
					Message *string `json:"message"`
					Type    *string `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &body); err != nil || body.Error == nil || body.Error.Message == nil || body.Error.Type == nil {
				t.Fatalf("not an OpenAI error: %s", raw)
			}
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
			}
			if got := deref(body.Error.Param); got != tc.param {
				t.Errorf("param %q, want %q", got, tc.param)
			}
			if got := deref(body.Error.Code); got != tc.code {
				t.Errorf("code %q, want %q", got, tc.code)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
