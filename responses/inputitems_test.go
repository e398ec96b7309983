package responses

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
)

// TestInputItems runs testdata/input_items, the specification of GET
// /v1/responses/{id}/input_items: what a response's model saw, over
// chains, forks, compaction and conversations, paged both ways. It runs
// on both state stores.
func TestInputItems(t *testing.T) {
	onEachStateStore(t, func(t *testing.T, db *state.DB) {
		st := NewStore(db.Namespace("rs/"), StoreOptions{})
		ii := &inputItems{st: st, svc: New(st, nil, Config{CollectInterval: -1})}
		datadriven.RunTest(t, "testdata/input_items", ii.run)
	})
}

type inputItems struct {
	st  *StateStore
	svc *Service
}

func (ii *inputItems) run(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	arg := func(name string) string { return cmdArg(d, name) }
	tenant := arg("tenant")
	if tenant == "" {
		tenant = "a"
	}
	var out strings.Builder
	var err error
	switch d.Cmd {
	case "end":
		err = ii.end(ctx, tenant, arg, kindItems(d, "in"), kindItems(d, "out"), &out)
	case "queue":
		rec := ii.record(tenant, arg)
		rec.Input, rec.Job = kindItems(d, "in"), &Job{}
		err = ii.st.PutResponse(ctx, rec, true)
	case "conversation":
		err = ii.st.CreateConversation(ctx, tenant, &wire.Conversation{ID: arg("id"), Object: "conversation"}, kindItems(d, "items"))
	case "list":
		opts := ListOptions{Order: arg("order"), After: arg("after")}
		d.MaybeScanArgs(t, "limit", &opts.Limit)
		var l *wire.ItemList
		if l, err = ii.svc.InputItems(ctx, tenant, arg("id"), opts); err == nil {
			fmt.Fprintf(&out, "%s\n", showList(l))
		}
	case "pages":
		// Every page, each after the last one's last_id, as a client
		// paging through the whole list does.
		opts := ListOptions{Order: arg("order")}
		d.MaybeScanArgs(t, "limit", &opts.Limit)
		for range 100 {
			var l *wire.ItemList
			if l, err = ii.svc.InputItems(ctx, tenant, arg("id"), opts); err != nil {
				break
			}
			fmt.Fprintf(&out, "%s\n", showList(l))
			if !l.HasMore {
				break
			}
			opts.After = *l.LastID
		}
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	if err != nil {
		var e *apierror.Error
		if errors.As(err, &e) {
			fmt.Fprintf(&out, "error: %d %s (param %s, code %s)\n", e.Status, e.Message, e.Param, e.Code)
		} else {
			fmt.Fprintf(&out, "error: %v\n", err)
		}
	}
	return out.String()
}

func (ii *inputItems) record(tenant string, arg func(string) string) *Record {
	resp := &wire.Response{ID: arg("id"), Object: "response", Status: wire.StatusCompleted, Output: []wire.Item{}}
	rec := &Record{Tenant: tenant, Response: resp, Conversation: arg("conv")}
	if prev := arg("prev"); prev != "" {
		resp.PreviousResponseID = &prev
	}
	return rec
}

// end stores a response that has ended, as the create path does: its
// input and output after its previous response's context, or at the end
// of its conversation.
func (ii *inputItems) end(ctx context.Context, tenant string, arg func(string) string, in, output []wire.Item, out *strings.Builder) error {
	rec := ii.record(tenant, arg)
	rec.Inputs = len(in)
	var base []Segment
	if prev := rec.Response.PreviousResponseID; prev != nil {
		p, err := ii.st.GetResponse(ctx, tenant, *prev)
		if err != nil {
			return err
		}
		base = p.Context
	}
	if err := ii.st.EndResponse(ctx, rec, base, append(in, output...), nil); err != nil {
		return err
	}
	fmt.Fprintf(out, "context %s own %s\n", segments(rec.Context), segments([]Segment{rec.Own}))
	return nil
}

// kindItems are the items of argument key (kindItem).
func kindItems(d *datadriven.TestData, key string) []wire.Item {
	var items []wire.Item
	for _, a := range d.CmdArgs {
		if a.Key != key {
			continue
		}
		for _, id := range a.Vals {
			items = append(items, kindItem(id))
		}
	}
	return items
}

// kindItem is an item of the kind its id's first letter names: u, s, d a
// user, system, developer message; a an assistant message; f a function
// call; o its output; r reasoning; c a compaction item.
func kindItem(id string) wire.Item {
	it := wire.Item{ID: id, Status: wire.StatusCompleted}
	switch id[0] {
	case 'u', 's', 'd', 'a':
		it.Type, it.Role = wire.ItemMessage, map[byte]string{'u': "user", 's': "system", 'd': "developer", 'a': "assistant"}[id[0]]
		it.Content = []wire.ContentPart{{Type: "input_text", Text: id}}
	case 'f':
		it.Type, it.CallID, it.Name, it.Arguments = wire.ItemFunctionCall, "call_"+id, "f", "{}"
	case 'o':
		it.Type, it.CallID, it.Output = wire.ItemFunctionCallOutput, "call_f"+id[1:], "ok"
	case 'r':
		it.Type, it.Content = wire.ItemReasoning, []wire.ContentPart{{Type: wire.PartReasoning, Text: id}}
	case 'c':
		it.Type, it.EncryptedContent = wire.ItemCompaction, "sealed-"+id
	default:
		panic("no kind of item starts with " + id[:1])
	}
	return it
}

func showList(l *wire.ItemList) string {
	first, last := "null", "null"
	if l.FirstID != nil {
		first, last = *l.FirstID, *l.LastID
	}
	return fmt.Sprintf("%s first=%s last=%s has_more=%t", itemIDs(l.Data), first, last, l.HasMore)
}

// TestInputItemsMatchCompacted: over random chains with forks and
// compaction items, paging through a response's input items, either way
// and at any limit, gives what load builds the model's context from:
// compacted over its context up to its own input.
func TestInputItemsMatchCompacted(t *testing.T) {
	ctx := context.Background()
	st := NewStore(state.NewMemory().Namespace("rs/"), StoreOptions{})
	svc := New(st, nil, Config{CollectInterval: -1})
	rng := rand.New(rand.NewPCG(32, 2))
	kinds := []string{"u", "u", "s", "a", "a", "f", "o", "r", "c"}
	var recs []*Record
	n := 0
	newItems := func(k int) []wire.Item {
		var items []wire.Item
		for range k {
			n++
			items = append(items, kindItem(fmt.Sprintf("%s%d", kinds[rng.IntN(len(kinds))], n)))
		}
		return items
	}
	for i := range 40 {
		rec := &Record{Tenant: "a", Response: &wire.Response{ID: fmt.Sprintf("resp%d", i), Object: "response", Status: wire.StatusCompleted, Output: []wire.Item{}}}
		var base []Segment
		if len(recs) > 0 && rng.IntN(8) > 0 {
			// Mostly the tip, sometimes an earlier response: a fork.
			prev := recs[len(recs)-1]
			if rng.IntN(4) == 0 {
				prev = recs[rng.IntN(len(recs))]
			}
			rec.Response.PreviousResponseID, base = &prev.Response.ID, prev.Context
		}
		in, out := newItems(1+rng.IntN(3)), newItems(rng.IntN(3))
		rec.Inputs = len(in)
		if err := st.EndResponse(ctx, rec, base, append(in, out...), nil); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	for _, rec := range recs {
		all, err := st.LoadContext(ctx, inputContext(rec))
		if err != nil {
			t.Fatal(err)
		}
		want := itemIDs(compacted(all))
		for _, order := range []string{"asc", "desc"} {
			for _, limit := range []int{1, 2, 3, 7, 100} {
				opts := ListOptions{Order: order, Limit: limit}
				var got []wire.Item
				for {
					l, err := svc.InputItems(ctx, "a", rec.Response.ID, opts)
					if err != nil {
						t.Fatalf("%s %s limit %d after %q: %v", rec.Response.ID, order, limit, opts.After, err)
					}
					got = append(got, l.Data...)
					if !l.HasMore {
						break
					}
					opts.After = *l.LastID
				}
				if order == "desc" {
					slices.Reverse(got)
				}
				if itemIDs(got) != want {
					t.Fatalf("%s %s limit %d:\n got %s\nwant %s", rec.Response.ID, order, limit, itemIDs(got), want)
				}
			}
		}
	}
}
