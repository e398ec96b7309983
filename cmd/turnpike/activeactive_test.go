package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/state/redistest"
)

// startPair starts two gateways wired as `turnpike serve` wires them, on
// one Redis and one simulated fleet, and returns an SDK client of each.
func startPair(t *testing.T) [2]openai.Client {
	t.Helper()
	srv := redistest.Start(t)
	sf := simFlags{replicas: 2, accelerator: defaultSimAccelerator, model: defaultSimModel, served: defaultSimServedModel, flavor: sim.FlavorVLLM, timeScale: 0.02}
	simCfg := sf.config()
	fleet, err := sim.StartFleet(t.Context(), sf.replicas, simCfg, "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	var clients [2]openai.Client
	for i := range clients {
		cfg := &Config{}
		cfg.EnsureDefaults()
		cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
		cfg.State = state.Config{Backend: state.BackendRedis, URL: srv.URL()}
		cfg.Pools = append(cfg.Pools, simPool(&simCfg, fleet))
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		st, err := startStack(t.Context(), cfg, nil, 0, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close(context.Background()) })
		clients[i] = openai.NewClient(option.WithBaseURL("http://"+st.addr+"/v1"), option.WithAPIKey("any"), option.WithMaxRetries(0))
	}
	return clients
}

func input(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// TestActiveActiveChain: on two gateways sharing one Redis, a chain of 50
// Responses turns alternates gateways, each naming the response the other
// one created; each turn's context holds every turn before it (the engine
// counted the previous turn's input and output again), and either gateway
// reads and deletes what the other wrote.
func TestActiveActiveChain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	gw := startPair(t)
	ctx := t.Context()
	const turns = 50
	var prev *responses.Response
	for i := range turns {
		p := responses.ResponseNewParams{Model: defaultSimServedModel, Input: input("turn " + string(rune('A'+i%26))), MaxOutputTokens: openai.Int(4)}
		if prev != nil {
			p.PreviousResponseID = openai.String(prev.ID)
		}
		r, err := gw[i%2].Responses.New(ctx, p)
		if err != nil {
			t.Fatalf("turn %d on gateway %d: %v", i, i%2, err)
		}
		// The simulated engine answers at length: a short answer ends at
		// the token budget.
		if r.Status != responses.ResponseStatusCompleted && r.IncompleteDetails.Reason != "max_output_tokens" {
			t.Fatalf("turn %d: status %s %+v", i, r.Status, r.IncompleteDetails)
		}
		if prev != nil {
			if r.PreviousResponseID != prev.ID {
				t.Errorf("turn %d: previous_response_id %q, want %q", i, r.PreviousResponseID, prev.ID)
			}
			if r.Usage.InputTokens < prev.Usage.InputTokens+prev.Usage.OutputTokens {
				t.Fatalf("turn %d on gateway %d: %d input tokens, fewer than the previous turn's %d in and %d out: the context lost turns",
					i, i%2, r.Usage.InputTokens, prev.Usage.InputTokens, prev.Usage.OutputTokens)
			}
		}
		prev = r
	}
	for g := range gw {
		got, err := gw[g].Responses.Get(ctx, prev.ID, responses.ResponseGetParams{})
		if err != nil || got.OutputText() != prev.OutputText() {
			t.Errorf("gateway %d reads the last turn: %v, %q want %q", g, err, got.OutputText(), prev.OutputText())
		}
	}
	// Written by gateway 1 (turn 49), deleted through gateway 0, gone on both.
	if err := gw[0].Responses.Delete(ctx, prev.ID); err != nil {
		t.Fatal(err)
	}
	for g := range gw {
		var apiErr *openai.Error
		if _, err := gw[g].Responses.Get(ctx, prev.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
			t.Errorf("gateway %d after delete: %v, want 404", g, err)
		}
	}
}

// TestActiveActiveConversation: a conversation created on one gateway
// takes turns on both, and either lists the same items in order.
func TestActiveActiveConversation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, an engine fleet and two gateways")
	}
	gw := startPair(t)
	ctx := t.Context()
	conv, err := gw[0].Conversations.New(ctx, conversations.ConversationNewParams{
		Items: []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage("You are terse.", responses.EasyInputMessageRoleSystem)},
	})
	if err != nil {
		t.Fatal(err)
	}
	const turns = 10
	var want []string
	for i := range turns {
		text := "question " + string(rune('a'+i))
		r, err := gw[(i+1)%2].Responses.New(ctx, responses.ResponseNewParams{
			Model: defaultSimServedModel, Input: input(text), MaxOutputTokens: openai.Int(4),
			Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
		})
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		want = append(want, text, r.OutputText())
	}
	added, err := gw[1].Conversations.Items.New(ctx, conv.ID, conversations.ItemNewParams{
		Items: []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage("a note", responses.EasyInputMessageRoleUser)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, "a note")
	for g := range gw {
		items, err := gw[g].Conversations.Items.List(ctx, conv.ID, conversations.ItemListParams{Order: conversations.ItemListParamsOrderAsc, Limit: openai.Int(100)})
		if err != nil {
			t.Fatal(err)
		}
		if len(items.Data) != 1+len(want) {
			t.Fatalf("gateway %d lists %d items, want %d", g, len(items.Data), 1+len(want))
		}
		for i, w := range want {
			if got := items.Data[i+1].AsMessage().Content[0].Text; got != w {
				t.Errorf("gateway %d item %d: %q, want %q", g, i+1, got, w)
			}
		}
		one, err := gw[g].Conversations.Items.Get(ctx, conv.ID, added.Data[0].ID, conversations.ItemGetParams{})
		if err != nil || one.ID != added.Data[0].ID {
			t.Errorf("gateway %d gets the item added on 1: %v", g, err)
		}
	}
}
