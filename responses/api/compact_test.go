package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
)

const summaryHeader = "Summary of the conversation so far"

// compactedInput is a compaction's output as the next request's input:
// its user messages, then its compaction item, as a client sends them.
func compactedInput(t *testing.T, out []responses.ResponseOutputItemUnion) responses.ResponseInputParam {
	t.Helper()
	var in responses.ResponseInputParam
	for _, o := range out {
		switch o.Type {
		case "message":
			var m struct {
				Role    string `json:"role"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			if err := json.Unmarshal([]byte(o.RawJSON()), &m); err != nil || m.Role != "user" {
				t.Fatalf("output message %s: want a user message", o.RawJSON())
			}
			in = append(in, responses.ResponseInputItemParamOfMessage(m.Content[0].Text, responses.EasyInputMessageRoleUser))
		case "compaction":
			c := o.AsCompaction()
			item := responses.ResponseInputItemParamOfCompaction(c.EncryptedContent)
			item.OfCompaction.ID = openai.String(c.ID)
			in = append(in, item)
		default:
			t.Fatalf("compaction output holds a %s", o.Type)
		}
	}
	return in
}

// summaryOf is the compaction summary the engine's last request shows,
// "" if none.
func summaryOf(t *testing.T, st *gatewaytest.Stack) string {
	t.Helper()
	for _, m := range engineMessages(t, st) {
		if c, _ := m["content"].(string); strings.HasPrefix(c, summaryHeader) {
			return c
		}
	}
	return ""
}

func hasRole(msgs []map[string]any, role string) bool {
	for _, m := range msgs {
		if m["role"] == role {
			return true
		}
	}
	return false
}

// TestSDKCompact: POST /v1/responses/compact (the SDK's Compact) asks the
// model to summarise the conversation and answers with its user messages
// and a compaction item; a later stateless request carrying them shows
// the engine the summary in place of what it stands for.
func TestSDKCompact(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	history := responses.ResponseCompactParamsInputUnion{OfResponseInputItemArray: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("The secret word is pelican.", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfMessage("Noted: pelican.", responses.EasyInputMessageRoleAssistant),
		responses.ResponseInputItemParamOfMessage("Also remember the number 42.", responses.EasyInputMessageRoleUser),
	}}
	c, err := st.Client.Responses.Compact(ctx, responses.ResponseCompactParams{Model: testModel, Input: history, Instructions: openai.String("Be brief.")})
	if err != nil {
		t.Fatal(err)
	}
	asked := engineMessages(t, st)
	if last, _ := asked[len(asked)-1]["content"].(string); !strings.Contains(last, "summary") || !strings.Contains(st.Engine.Last(), "pelican") {
		t.Fatalf("the engine was not asked to summarise the conversation: %v", asked)
	}
	if c.Object != "response.compaction" || c.ID == "" || c.CreatedAt == 0 || len(c.Output) != 3 || c.Usage.InputTokens == 0 {
		t.Fatalf("compaction %s", c.RawJSON())
	}
	item := c.Output[2].AsCompaction()
	if c.Output[2].Type != "compaction" || item.EncryptedContent == "" || !strings.HasPrefix(item.ID, "cmp_") {
		t.Fatalf("compaction item %s", c.Output[2].RawJSON())
	}

	next := append(compactedInput(t, c.Output), responses.ResponseInputItemParamOfMessage("What was the word?", responses.EasyInputMessageRoleUser))
	r, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Store: openai.Bool(false),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: next}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != responses.ResponseStatusCompleted {
		t.Fatalf("status %s", r.Status)
	}
	msgs := engineMessages(t, st)
	if summaryOf(t, st) == "" || len(summaryOf(t, st)) <= len(summaryHeader)+4 {
		t.Fatalf("no summary in the engine's messages: %v", msgs)
	}
	if len(msgs) != 4 || hasRole(msgs, "assistant") {
		t.Fatalf("engine messages %v: want the two user messages, the summary and the question", msgs)
	}

	t.Run("previous_response_id", func(t *testing.T) {
		r1, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text("Plan a trip to Lisbon.")})
		if err != nil {
			t.Fatal(err)
		}
		c, err := st.Client.Responses.Compact(ctx, responses.ResponseCompactParams{Model: testModel, PreviousResponseID: openai.String(r1.ID)})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Output) != 2 || c.Output[1].Type != "compaction" || !strings.Contains(st.Engine.Last(), "Lisbon") {
			t.Fatalf("compaction %s", c.RawJSON())
		}
	})

	t.Run("tampered", func(t *testing.T) {
		bad := compactedInput(t, c.Output)
		bad[len(bad)-1].OfCompaction.EncryptedContent = flipMiddle(item.EncryptedContent)
		_, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Store: openai.Bool(false),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: bad}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "invalid_encrypted_content" || apiErr.Param != "input[2].encrypted_content" {
			t.Fatalf("err %v", err)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for name, p := range map[string]responses.ResponseCompactParams{
			"nothing to compact": {Model: testModel},
			"unknown previous":   {Model: testModel, PreviousResponseID: openai.String("resp_nope")},
		} {
			_, err := st.Client.Responses.Compact(ctx, p)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode/100 != 4 {
				t.Errorf("%s: err %v", name, err)
			}
		}
		resp, err := http.Post(st.Front.URL+"/v1/responses/compact", "application/json", strings.NewReader(`{"model":"m","input":"x","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("stream on compact: status %d, want 400 unknown_parameter", resp.StatusCode)
		}
	})
}

// TestSDKAutoCompaction: with context_management's compact_threshold, a
// context whose prompt passes it is compacted before the turn: the output
// starts with the compaction item (streamed like any item), the engine
// answers from the summary, and the chain's next turn goes on from it.
func TestSDKAutoCompaction(t *testing.T) {
	st := gatewaytest.NewStackWith(t, 0, tpresponses.Config{}, mount)
	ctx := context.Background()
	r1, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel,
		Input: gatewaytest.Text("The secret word is pelican. Remember it for later, it matters a great deal.")})
	if err != nil {
		t.Fatal(err)
	}
	before := len(st.Engine.Bodies)
	params := responses.ResponseNewParams{Model: testModel, PreviousResponseID: openai.String(r1.ID), Input: gatewaytest.Text("What was the word?"),
		ContextManagement: []responses.ResponseNewParamsContextManagement{{Type: "compaction", CompactThreshold: openai.Int(20)}}}
	evs, r2 := streamed(t, st, params)
	if len(r2.Output) != 2 || r2.Output[0].Type != "compaction" || r2.Output[0].AsCompaction().EncryptedContent == "" || r2.Output[1].Type != "message" {
		t.Fatalf("output %s", r2.RawJSON())
	}
	var first []string
	for _, ev := range evs {
		if strings.HasPrefix(ev.Type, "response.output_item.") {
			first = append(first, ev.Type+"/"+ev.Item.Type)
		}
	}
	if len(first) < 2 || first[0] != "response.output_item.added/compaction" || first[1] != "response.output_item.done/compaction" {
		t.Fatalf("item events %v", first)
	}
	st.Engine.Mu.Lock()
	asked := len(st.Engine.Bodies) - before
	st.Engine.Mu.Unlock()
	if asked != 2 {
		t.Fatalf("the engine was asked %d times; want the summary, then the answer", asked)
	}
	msgs := engineMessages(t, st)
	if summaryOf(t, st) == "" || hasRole(msgs, "assistant") {
		t.Fatalf("engine messages %v: want the user messages and the summary, no earlier answer", msgs)
	}

	// Below the threshold nothing is compacted; the chain goes on from
	// the summary and the answer after it.
	params.PreviousResponseID, params.Input, params.ContextManagement = openai.String(r2.ID), gatewaytest.Text("Thanks."), nil
	r3, err := st.Client.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(r3.Output) != 1 || r3.Output[0].Type != "message" {
		t.Fatalf("third output %s", r3.RawJSON())
	}
	msgs = engineMessages(t, st)
	if summaryOf(t, st) == "" || len(msgs) != 5 || msgs[3]["role"] != "assistant" {
		t.Fatalf("third turn's engine messages %v: want two user messages, the summary, the answer after it, the new one", msgs)
	}
}

// flipMiddle changes one base64 character in the middle of s, where every
// bit counts (the last character may carry padding bits a decoder ignores).
func flipMiddle(s string) string {
	b := []byte(s)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}
