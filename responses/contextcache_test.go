package responses

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// TestContextCache: a chain's turns continued from the context cache send
// the engine exactly the bodies that turns rebuilding every context from
// the store send: a linear chain with tool calls, a fork, a turn after a
// conversation's response whose conversation then loses an item, and a
// deleted response, which is not continued.
func TestContextCache(t *testing.T) {
	run := func(cached bool) (*fakeEngine, *Service) {
		eng := &fakeEngine{}
		svc, _ := newTestService(t, eng)
		if !cached {
			svc.contexts = nil
		}
		ctx := context.Background()
		create := func(body string, args ...any) *wire.Response {
			t.Helper()
			resp, err := svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(body, args...)), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		tools := `[{"type":"function","name":"weather","parameters":{"type":"object"}}]`
		r1 := create(`{"model":"m","input":"weather?","instructions":"be brief","tools":%s}`, tools)
		r2 := create(`{"model":"m","previous_response_id":%q,"tools":%s,"input":[{"type":"function_call_output","call_id":%q,"output":"sunny"}]}`, r1.ID, tools, r1.Output[0].CallID)
		r3 := create(`{"model":"m","previous_response_id":%q,"input":"and tomorrow?"}`, r2.ID)
		r4 := create(`{"model":"m","previous_response_id":%q,"input":"thanks"}`, r3.ID)
		// A turn the engine refuses took r4's entry; its retry, and a
		// fork beside it, load r4's context from the store.
		eng.refuse = func() error { return errors.New("refused") }
		if _, err := svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","previous_response_id":%q,"input":"more"}`, r4.ID)), nil, nil); err == nil {
			t.Fatal("a refused turn succeeded")
		}
		eng.refuse = nil
		create(`{"model":"m","previous_response_id":%q,"input":"more"}`, r4.ID)
		create(`{"model":"m","previous_response_id":%q,"input":"or less"}`, r4.ID)
		// A fork from r2, whose entry r3 replaced, and its next turn.
		r5 := create(`{"model":"m","previous_response_id":%q,"input":[{"role":"user","content":[{"type":"input_text","text":"in "},{"type":"input_text","text":"Rome?"}]}]}`, r2.ID)
		create(`{"model":"m","previous_response_id":%q,"input":"ok","instructions":"be kind"}`, r5.ID)

		c, err := svc.CreateConversation(ctx, "a", []byte(`{"items":[{"role":"user","content":"first"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		rc := create(`{"model":"m","input":"in the conversation","conversation":%q}`, c.ID)
		rd := create(`{"model":"m","input":"after it","previous_response_id":%q}`, rc.ID)
		l, err := svc.ConversationItems(ctx, "a", c.ID, ListOptions{Order: "asc"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.DeleteConversationItem(ctx, "a", c.ID, l.Data[0].ID); err != nil {
			t.Fatal(err)
		}
		create(`{"model":"m","input":"and after the delete","previous_response_id":%q}`, rd.ID)

		if _, err := svc.Delete(ctx, "a", r5.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Create(ctx, "a", mustDecode(t, fmt.Sprintf(`{"model":"m","previous_response_id":%q,"input":"again"}`, r5.ID)), nil, nil); !errors.Is(err, ErrNotFound) {
			t.Errorf("continuing a deleted response: %v, want not found", err)
		}
		return eng, svc
	}
	stored, _ := run(false)
	eng, svc := run(true)
	want, got := stored.bodies, eng.bodies
	if len(got) != len(want) {
		t.Fatalf("%d engine requests, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("turn %d: engine body from the cache\n  %s\nfrom the store\n  %s", i+1, got[i], want[i])
		}
	}
	// r3, r4, the refused turn and r6: r1 starts a chain, which is cached
	// from its second turn on, the refused turn took r4's entry, r5 forks
	// from an entry r3 replaced, and no context that reads a
	// conversation's chain is cached.
	if n := svc.contexts.hits.Load(); n != 4 {
		t.Errorf("%d turns continued from the cache, want 4", n)
	}
}

// TestRenderAllocsFlat: rendering a context allocates as often for a
// long agent session (messages, tool calls and their outputs) as for a
// short one, so that a turn's allocations do not grow with its history.
func TestRenderAllocsFlat(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector are not meaningful")
	}
	session := func(turns int) []wire.Item {
		var items []wire.Item
		for i := range turns {
			call := fmt.Sprintf("call_%d", i)
			items = append(items,
				wire.Item{Type: wire.ItemMessage, Role: "user", Content: []wire.ContentPart{{Type: "input_text", Text: fmt.Sprint("step ", i)}}},
				wire.Item{Type: wire.ItemReasoning, Content: []wire.ContentPart{{Type: wire.PartReasoning, Text: "thinking"}}},
				wire.Item{Type: wire.ItemMessage, Role: "assistant", Content: []wire.ContentPart{{Type: "output_text", Text: "looking"}}},
				wire.Item{Type: wire.ItemFunctionCall, CallID: call, Name: "grep", Arguments: `{"q":"x"}`},
				wire.Item{Type: wire.ItemFunctionCall, CallID: call + "b", Name: "ls", Arguments: `{}`},
				wire.Item{Type: wire.ItemFunctionCallOutput, CallID: call, Output: "a.go:1: x"},
				wire.Item{Type: wire.ItemFunctionCallOutput, CallID: call + "b", Output: "a.go"},
			)
		}
		return items
	}
	req := mustDecode(t, `{"model":"m","input":"x","instructions":"be brief","tools":[{"type":"function","name":"grep","parameters":{"type":"object"}}]}`)
	allocs := func(turns int) float64 {
		items := session(turns)
		return testing.AllocsPerRun(20, func() {
			if _, _, err := renderChat(req, items); err != nil {
				t.Fatal(err)
			}
		})
	}
	if short, long := allocs(5), allocs(200); long != short {
		t.Errorf("rendering allocates %v times for 5 turns, %v for 200", short, long)
	}
}
