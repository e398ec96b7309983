package responses

import (
	"testing"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// checkPrompt fails t unless the KV index's rendering of p is the
// simulated engine's chat template applied to body: the prefix hashes
// routing computes are those the engine's KV events report.
func checkPrompt(t *testing.T, body []byte, p *prompt.Prompt) {
	t.Helper()
	req, err := sim.DecodeChatRequest(body)
	if err != nil {
		t.Fatalf("the engine refuses the body: %v\n%s", err, body)
	}
	want := sim.RenderChat(req.Messages, req.Tools)
	if got := string(prompt.AppendRender(nil, p)); got != want {
		t.Fatalf("prompt.AppendRender(prompt):\n%q\nthe engine renders:\n%q", got, want)
	}
	if p.Model != req.Model {
		t.Errorf("prompt model %q, body model %q", p.Model, req.Model)
	}
}

func TestRenderChatPrompt(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		// history is earlier turns' items, before the request's input.
		history []wire.Item
	}{
		{name: "text", body: `{"model":"m","input":"hello"}`},
		{name: "instructions", body: `{"model":"m","instructions":"Be brief.","input":"hello"}`},
		{name: "developer and parts", body: `{"model":"m","input":[
			{"role":"developer","content":"rules"},
			{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}]}`},
		{name: "empty text", body: `{"model":"m","input":[{"role":"user","content":""}]}`},
		{name: "tools", body: `{"model":"m","input":"weather?","tools":[
			{"type":"function","name":"weather","description":"<b>&</b>","parameters":{"type":"object","properties":{"n":{"type":"number","maximum":1.50e2}}},"strict":true},
			{"type":"function","name":"time"}]}`},
		{name: "tool calls", body: `{"model":"m","tools":[{"type":"function","name":"f"}],"input":[
			{"role":"user","content":"go"},
			{"role":"assistant","content":"calling"},
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\":1}"},
			{"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"one"},
			{"type":"function_call_output","call_id":"c2","output":"two"}]}`},
		{name: "call without text", body: `{"model":"m","input":[
			{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"q\":\"<&>\"}"},
			{"type":"function_call_output","call_id":"c1","output":"done"}]}`},
		{name: "history", body: `{"model":"m","instructions":"sys","input":"again"}`, history: []wire.Item{
			{Type: wire.ItemMessage, Role: "user", Content: []wire.ContentPart{{Type: "input_text", Text: "first"}}},
			{Type: wire.ItemMessage, Role: "assistant", Content: []wire.ContentPart{{Type: "output_text", Text: "answer\nwith lines"}}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := mustDecode(t, tc.body)
			body, p, err := renderChat(req, append(tc.history, req.Input...))
			if err != nil {
				t.Fatal(err)
			}
			checkPrompt(t, body, p)
		})
	}
}

// TestEngineRequestPrompt: the engine is handed the prompt with the body.
func TestEngineRequestPrompt(t *testing.T) {
	eng := &fakeEngine{contextLength: 100000}
	svc, _ := newTestService(t, eng)
	var got *dispatch.Spec
	eng.seen = func(r *dispatch.Spec) { got = r }
	if _, err := svc.Create(t.Context(), "a", mustDecode(t, `{"model":"m","input":"hi","instructions":"sys"}`), nil, nil); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Prompt == nil {
		t.Fatal("no prompt in the engine request")
	}
	checkPrompt(t, got.Body, got.Prompt)
	// Counted once, as the engine will see the prompt, when the context
	// window was checked; dispatch takes that count and does not count again.
	if want := prompt.Count(prompt.Approx{}, got.Prompt); got.PromptTokens != want || want == 0 {
		t.Errorf("prompt tokens %d, want %d", got.PromptTokens, want)
	}
}
