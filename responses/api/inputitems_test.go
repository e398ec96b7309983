package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/conversations"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
)

// itemKey names a listed item: a user message by its text (the client
// never learns its input items' ids), anything else by its id.
func itemKey(it responses.ResponseItemUnion) string {
	if it.Type == "message" && it.Role == "user" {
		return "user:" + it.AsMessage().Content[0].Text
	}
	return it.ID
}

// listKeys pages through response id's input items as the SDK does.
func listKeys(t *testing.T, st *gatewaytest.Stack, id string, params responses.InputItemListParams) []string {
	t.Helper()
	var got []string
	iter := st.Client.Responses.InputItems.ListAutoPaging(context.Background(), id, params)
	for iter.Next() {
		got = append(got, itemKey(iter.Current()))
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// pageIDs are a page's first_id and last_id, which the SDK's page type
// does not keep.
func pageIDs(t *testing.T, raw string) (first, last *string) {
	t.Helper()
	var ids struct {
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}
	if err := json.Unmarshal([]byte(raw), &ids); err != nil {
		t.Fatal(err)
	}
	return ids.FirstID, ids.LastID
}

// TestSDKInputItemsChain: the input items of a chained response are the
// whole chain its model saw, every earlier turn's input and output, then
// its own input, newest first unless asked otherwise, paged both ways
// (issue 32, item 2: a 10-turn chain listed only its last input).
func TestSDKInputItemsChain(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	const turns = 10
	var chain []*responses.Response
	var want []string // the last response's input items, oldest first
	for i := range turns {
		p := responses.ResponseNewParams{Model: testModel, Input: gatewaytest.Text(fmt.Sprintf("turn %d", i)), MaxOutputTokens: openai.Int(4)}
		if i > 0 {
			p.PreviousResponseID = openai.String(chain[i-1].ID)
		}
		r, err := st.Client.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, r)
		want = append(want, fmt.Sprintf("user:turn %d", i))
		if i < turns-1 {
			for _, o := range r.Output {
				want = append(want, o.ID)
			}
		}
	}
	last := chain[turns-1].ID
	if len(want) > 20 {
		t.Fatalf("the chain's %d items do not fit one default page; the test expects them to", len(want))
	}
	desc := slices.Clone(want)
	slices.Reverse(desc)
	keys := func(data []responses.ResponseItemUnion) []string {
		var out []string
		for _, it := range data {
			out = append(out, itemKey(it))
		}
		return out
	}

	t.Run("default", func(t *testing.T) {
		page, err := st.Client.Responses.InputItems.List(ctx, last, responses.InputItemListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(page.Data); !slices.Equal(got, desc) || page.HasMore {
			t.Fatalf("newest first, one page:\n got %v (has_more %v)\nwant %v", got, page.HasMore, desc)
		}
		first, lastID := pageIDs(t, page.RawJSON())
		if first == nil || *first != page.Data[0].ID || lastID == nil || *lastID != page.Data[len(page.Data)-1].ID {
			t.Errorf("first_id %v, last_id %v", first, lastID)
		}
	})

	for _, tc := range []struct {
		name  string
		order responses.InputItemListParamsOrder
		limit int64
		want  []string
	}{
		{"desc by 3", responses.InputItemListParamsOrderDesc, 3, desc},
		{"asc by 4", responses.InputItemListParamsOrderAsc, 4, want},
		{"asc by 1", responses.InputItemListParamsOrderAsc, 1, want},
		{"desc by 100", "", 100, desc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Page by hand: each page after the last one's last_id.
			params := responses.InputItemListParams{Order: tc.order, Limit: openai.Int(tc.limit)}
			var got []string
			for n := 0; ; n++ {
				page, err := st.Client.Responses.InputItems.List(ctx, last, params)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Data) > int(tc.limit) || n > len(tc.want) {
					t.Fatalf("page %d: %d items, limit %d", n, len(page.Data), tc.limit)
				}
				got = append(got, keys(page.Data)...)
				if wantMore := len(got) < len(tc.want); page.HasMore != wantMore {
					t.Fatalf("page %d: has_more %v after %d of %d items", n, page.HasMore, len(got), len(tc.want))
				}
				if !page.HasMore {
					break
				}
				_, lastID := pageIDs(t, page.RawJSON())
				params.After = openai.String(*lastID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("paged by hand:\n got %v\nwant %v", got, tc.want)
			}
			// And as the SDK pages.
			if got := listKeys(t, st, last, responses.InputItemListParams{Order: tc.order, Limit: openai.Int(tc.limit)}); !slices.Equal(got, tc.want) {
				t.Errorf("auto-paged:\n got %v\nwant %v", got, tc.want)
			}
		})
	}

	t.Run("mid-chain", func(t *testing.T) {
		// The fifth turn saw the four before it and its own input, not
		// what came after.
		n := slices.Index(want, "user:turn 4") + 1
		if got := listKeys(t, st, chain[4].ID, responses.InputItemListParams{Order: responses.InputItemListParamsOrderAsc}); !slices.Equal(got, want[:n]) {
			t.Errorf("turn 4:\n got %v\nwant %v", got, want[:n])
		}
		if got := listKeys(t, st, chain[0].ID, responses.InputItemListParams{}); !slices.Equal(got, []string{"user:turn 0"}) {
			t.Errorf("turn 0: %v", got)
		}
	})

	t.Run("bad parameters", func(t *testing.T) {
		// A later turn's output is no item of this list.
		laterOutput := chain[turns-1].Output[0].ID
		for _, tc := range []struct {
			name   string
			params responses.InputItemListParams
			param  string
		}{
			{"unknown after", responses.InputItemListParams{After: openai.String("msg_nope")}, "after"},
			{"after outside the list", responses.InputItemListParams{After: openai.String(laterOutput)}, "after"},
			{"order", responses.InputItemListParams{Order: "sideways"}, "order"},
			{"limit", responses.InputItemListParams{Limit: openai.Int(101)}, "limit"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := st.Client.Responses.InputItems.List(ctx, last, tc.params)
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest ||
					apiErr.Param != tc.param || apiErr.Code != "invalid_value" || apiErr.Type != "invalid_request_error" || apiErr.Message == "" {
					t.Fatalf("want a 400 on %s, got %v", tc.param, err)
				}
			})
		}
	})
}

// TestSDKInputItemsConversation: a response in a conversation lists its
// own turn's input only, not the conversation before it.
func TestSDKInputItemsConversation(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	conv, err := st.Client.Conversations.New(ctx, conversations.ConversationNewParams{
		Items: []responses.ResponseInputItemUnionParam{responses.ResponseInputItemParamOfMessage("You are terse.", responses.EasyInputMessageRoleSystem)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var last *responses.Response
	for _, in := range [][]string{{"first"}, {"second", "third"}} {
		var items responses.ResponseInputParam
		for _, s := range in {
			items = append(items, responses.ResponseInputItemParamOfMessage(s, responses.EasyInputMessageRoleUser))
		}
		last, err = st.Client.Responses.New(ctx, responses.ResponseNewParams{
			Model: testModel, MaxOutputTokens: openai.Int(4), Input: responses.ResponseNewParamsInputUnion{OfInputItemList: items},
			Conversation: responses.ResponseNewParamsConversationUnion{OfString: openai.String(conv.ID)},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := listKeys(t, st, last.ID, responses.InputItemListParams{Limit: openai.Int(1)})
	if want := []string{"user:third", "user:second"}; !slices.Equal(got, want) {
		t.Errorf("conversation turn: got %v, want %v", got, want)
	}
}

// TestSDKInputItemsCompacted: after a turn that compacted its context, a
// chained response lists what its model saw: the user messages, the
// compaction item and what follows it, not the earlier answers it stands
// for.
func TestSDKInputItemsCompacted(t *testing.T) {
	st := gatewaytest.NewStack(t, 0, mount)
	ctx := context.Background()
	r1, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(8),
		Input: gatewaytest.Text("The secret word is pelican. Remember it for later, it matters a great deal.")})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(8),
		PreviousResponseID: openai.String(r1.ID), Input: gatewaytest.Text("What was the word?"),
		ContextManagement: []responses.ResponseNewParamsContextManagement{{Type: "compaction", CompactThreshold: openai.Int(20)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r2.Output) != 2 || r2.Output[0].Type != "compaction" {
		t.Fatalf("the second turn did not compact: %s", r2.RawJSON())
	}
	r3, err := st.Client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, MaxOutputTokens: openai.Int(8),
		PreviousResponseID: openai.String(r2.ID), Input: gatewaytest.Text("Thanks.")})
	if err != nil {
		t.Fatal(err)
	}
	byTwo := func(order responses.InputItemListParamsOrder) responses.InputItemListParams {
		return responses.InputItemListParams{Order: order, Limit: openai.Int(2)}
	}
	pelican := "user:The secret word is pelican. Remember it for later, it matters a great deal."
	want := []string{pelican, "user:What was the word?", r2.Output[0].ID, r2.Output[1].ID, "user:Thanks."}
	if got := listKeys(t, st, r3.ID, byTwo(responses.InputItemListParamsOrderAsc)); !slices.Equal(got, want) {
		t.Errorf("after the compaction, asc:\n got %v\nwant %v", got, want)
	}
	slices.Reverse(want)
	if got := listKeys(t, st, r3.ID, byTwo("")); !slices.Equal(got, want) {
		t.Errorf("after the compaction, desc:\n got %v\nwant %v", got, want)
	}
	// The turn that compacted lists its input as it came: the compaction
	// item is its output.
	want = []string{pelican, r1.Output[0].ID, "user:What was the word?"}
	if got := listKeys(t, st, r2.ID, byTwo(responses.InputItemListParamsOrderAsc)); !slices.Equal(got, want) {
		t.Errorf("the compacting turn:\n got %v\nwant %v", got, want)
	}
	// An answer the compaction dropped is no cursor of r3's list.
	_, err = st.Client.Responses.InputItems.List(ctx, r3.ID, responses.InputItemListParams{After: openai.String(r1.Output[0].ID)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "after" {
		t.Errorf("after a dropped item: %v", err)
	}
}
