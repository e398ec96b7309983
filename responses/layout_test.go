package responses

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
)

// TestLayout runs testdata/layout, the specification of the store's key
// layout: each command prints the keys it wrote (+), changed (~) and
// removed (-), and what a read returns. It runs on both state stores, so
// both keep the same keys.
func TestLayout(t *testing.T) {
	onEachStateStore(t, func(t *testing.T, db *state.DB) {
		l := &layout{epoch: time.Unix(1_700_000_000, 0), ns: db.Namespace("rs/")}
		l.now = l.epoch
		l.st = NewStore(l.ns, StoreOptions{TTL: time.Hour, Now: func() time.Time { return l.now }})
		datadriven.RunTest(t, "testdata/layout", l.run)
	})
}

// onEachStateStore runs fn on a fresh state store of each kind, in
// memory and Pebble, so that both are held to one specification.
func onEachStateStore(t *testing.T, fn func(t *testing.T, db *state.DB)) {
	for _, impl := range []struct {
		name string
		open func(t *testing.T) *state.DB
	}{
		{"memory", func(*testing.T) *state.DB { return state.NewMemory() }},
		{"pebble", func(t *testing.T) *state.DB { return openStore(t, t.TempDir()).db }},
	} {
		t.Run(impl.name, func(t *testing.T) {
			db := impl.open(t)
			defer db.Close()
			fn(t, db)
		})
	}
}

// cmdArg is the first value of d's argument name, "" without one.
func cmdArg(d *datadriven.TestData, name string) string {
	for _, a := range d.CmdArgs {
		if a.Key == name && len(a.Vals) > 0 {
			return a.Vals[0]
		}
	}
	return ""
}

type layout struct {
	st    *StateStore
	ns    state.Namespace
	epoch time.Time
	now   time.Time
}

func (l *layout) run(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	arg := func(name string) string { return cmdArg(d, name) }
	var out strings.Builder
	before := l.snapshot(t)
	var err error
	switch d.Cmd {
	case "append", "fork":
		err = l.append(ctx, d, &out, arg)
	case "queue":
		rec := &Record{Tenant: arg("tenant"), Response: &wire.Response{ID: arg("id"), Object: "response", Status: wire.StatusQueued, Output: []wire.Item{}},
			Input: l.items(d), Job: &Job{Request: json.RawMessage(`{}`)}}
		err = l.st.PutResponse(ctx, rec, true)
	case "event":
		var seq int
		d.ScanArgs(t, "seq", &seq)
		err = l.st.AppendEvent(ctx, arg("id"), seq, fmt.Appendf(nil, `{"seq":%d}`, seq))
	case "events":
		after := -1
		d.MaybeScanArgs(t, "after", &after)
		var evs [][]byte
		if evs, err = l.st.Events(ctx, arg("id"), after); err == nil {
			fmt.Fprintf(&out, "events: %s\n", bytes.Join(evs, []byte(" ")))
		}
	case "drop-events":
		err = l.st.DropEvents(ctx, arg("id"))
	case "pending":
		var recs []*Record
		if recs, err = l.st.PendingJobs(ctx); err == nil {
			ids := []string{}
			for _, r := range recs {
				ids = append(ids, r.Response.ID)
			}
			fmt.Fprintf(&out, "pending: (%s)\n", strings.Join(ids, " "))
		}
	case "load":
		var rec *Record
		if rec, err = l.st.GetResponse(ctx, arg("tenant"), arg("id")); err == nil {
			var items []wire.Item
			if items, err = l.st.LoadContext(ctx, rec.Context); err == nil {
				fmt.Fprintf(&out, "context %s own %s\nitems: %s\n", segments(rec.Context), segments([]Segment{rec.Own}), itemIDs(items))
			}
		}
	case "item":
		var seg Segment
		if _, seg, err = l.st.GetItem(ctx, arg("tenant"), arg("id")); err == nil {
			fmt.Fprintf(&out, "%s at %s\n", arg("id"), segments([]Segment{seg}))
		}
	case "conversation":
		err = l.st.CreateConversation(ctx, arg("tenant"), &wire.Conversation{ID: arg("id"), Object: "conversation"}, l.items(d))
	case "add-items":
		err = l.st.AppendItems(ctx, arg("tenant"), arg("conv"), l.items(d))
	case "delete-item":
		err = l.st.DeleteItem(ctx, arg("tenant"), arg("conv"), arg("id"))
	case "list":
		err = l.list(ctx, t, d, &out, arg)
	case "delete":
		err = l.st.DeleteResponse(ctx, arg("tenant"), arg("id"))
	case "delete-conversation":
		err = l.st.DeleteConversation(ctx, arg("tenant"), arg("id"))
	case "advance":
		var by string
		d.ScanArgs(t, "by", &by)
		dur, perr := time.ParseDuration(by)
		if perr != nil {
			d.Fatalf(t, "%v", perr)
		}
		l.now = l.now.Add(dur)
		fmt.Fprintf(&out, "now %s\n", l.at(l.now.Unix()))
	case "collect":
		var n int
		if n, err = l.st.Collect(ctx, l.now); err == nil {
			fmt.Fprintf(&out, "collected %d\n", n)
		}
	case "keys":
		for _, k := range slices.Sorted(maps.Keys(before)) {
			fmt.Fprintf(&out, "%s\n", l.show(k, before[k]))
		}
		return out.String()
	default:
		d.Fatalf(t, "unknown command %s", d.Cmd)
	}
	if err != nil {
		fmt.Fprintf(&out, "error: %v\n", err)
	}
	l.diff(&out, before, l.snapshot(t))
	return out.String()
}

// append ends a response after prev's context, or at the end of conv;
// fork says the parent already has a child, and checks that a chain of
// the response's own began.
func (l *layout) append(ctx context.Context, d *datadriven.TestData, out *strings.Builder, arg func(string) string) error {
	tenant, id := arg("tenant"), arg("id")
	var base []Segment
	if prev := arg("prev"); prev != "" {
		p, err := l.st.GetResponse(ctx, tenant, prev)
		if err != nil {
			return err
		}
		base = p.Context
	}
	items := l.items(d)
	rec := &Record{Tenant: tenant, Response: &wire.Response{ID: id, Object: "response", Status: wire.StatusCompleted, Output: []wire.Item{}},
		Conversation: arg("conv"), Inputs: min(1, len(items))}
	var final *StreamEvent
	if ev := arg("event"); ev != "" {
		var seq int
		fmt.Sscan(ev, &seq)
		final = &StreamEvent{Seq: seq, Data: fmt.Appendf(nil, `{"seq":%d,"final":true}`, seq)}
	}
	if err := l.st.EndResponse(ctx, rec, base, items, final); err != nil {
		return err
	}
	fmt.Fprintf(out, "context %s own %s\n", segments(rec.Context), segments([]Segment{rec.Own}))
	if d.Cmd == "fork" && rec.Own.Chain != id {
		fmt.Fprintf(out, "not a fork: extended %s in place\n", rec.Own.Chain)
	}
	return nil
}

// list pages through a conversation's items.
func (l *layout) list(ctx context.Context, t *testing.T, d *datadriven.TestData, out *strings.Builder, arg func(string) string) error {
	_, seg, err := l.st.GetConversation(ctx, arg("tenant"), arg("conv"))
	if err != nil {
		return err
	}
	opts := ListOptions{Limit: 100, Order: arg("order"), After: arg("after")}
	d.MaybeScanArgs(t, "limit", &opts.Limit)
	items, more, err := l.st.ListItems(ctx, arg("tenant"), seg, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "items: %s more=%t\n", itemIDs(items), more)
	return nil
}

// items are the items named by the items argument: user messages whose
// text is their id.
func (l *layout) items(d *datadriven.TestData) []wire.Item {
	var items []wire.Item
	for _, a := range d.CmdArgs {
		if a.Key != "items" {
			continue
		}
		for _, id := range a.Vals {
			items = append(items, wire.Item{Type: wire.ItemMessage, ID: id, Status: wire.StatusCompleted, Role: "user", Content: []wire.ContentPart{{Type: "input_text", Text: id}}})
		}
	}
	return items
}

func (l *layout) snapshot(t *testing.T) map[string][]byte {
	m := map[string][]byte{}
	err := l.ns.Scan(context.Background(), state.Range{}, func(k, v []byte) error {
		m[string(k)] = bytes.Clone(v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// diff prints the keys added (+), changed (~) and removed (-), in key
// order.
func (l *layout) diff(out *strings.Builder, before, after map[string][]byte) {
	keys := slices.Sorted(maps.Keys(before))
	keys = slices.Compact(slices.Sorted(slices.Values(append(keys, slices.Collect(maps.Keys(after))...))))
	for _, k := range keys {
		b, wasThere := before[k]
		a, isThere := after[k]
		switch {
		case !wasThere && isThere:
			fmt.Fprintf(out, "+ %s\n", l.show(k, a))
		case wasThere && !isThere:
			fmt.Fprintf(out, "- %s\n", l.show(k, nil))
		case !bytes.Equal(a, b):
			fmt.Fprintf(out, "~ %s\n", l.show(k, a))
		}
	}
}

// show writes a key readably (binary seqs and times as numbers) and what
// its value means.
func (l *layout) show(k string, v []byte) string {
	b := []byte(k)
	var key, what string
	switch {
	case strings.HasPrefix(k, pfxItem), strings.HasPrefix(k, pfxEvent):
		key = fmt.Sprintf("%s%d", k[:len(k)-4], binary.BigEndian.Uint32(b[len(b)-4:]))
		if it, err := decodeStoredItem(v); strings.HasPrefix(k, pfxItem) && err == nil {
			what = it.ID
		} else if strings.HasPrefix(k, pfxEvent) {
			what = string(v)
		}
	case strings.HasPrefix(k, pfxTTL):
		at := int64(binary.BigEndian.Uint64(b[len(pfxTTL):]))
		key = fmt.Sprintf("%s%s/%c/%s", pfxTTL, l.at(at), b[len(pfxTTL)+8], k[len(pfxTTL)+9:])
	case strings.HasPrefix(k, pfxResp) && v != nil:
		var rec Record
		json.Unmarshal(v, &rec)
		what = "tenant=" + rec.Tenant
		if len(rec.Context) > 0 {
			what += fmt.Sprintf(" context=%s own=%s inputs=%d", segments(rec.Context), segments([]Segment{rec.Own}), rec.Inputs)
		}
		if rec.Job != nil {
			what += fmt.Sprintf(" job input=%s", itemIDs(rec.Input))
		}
		if rec.Conversation != "" {
			what += " conversation=" + rec.Conversation
		}
	case strings.HasPrefix(k, pfxHead) && v != nil:
		var h head
		json.Unmarshal(v, &h)
		what = fmt.Sprintf("tenant=%s next=%d expires=%s", h.Tenant, h.Next, l.at(h.ExpiresAt))
		if h.Conversation != nil {
			what += " conversation"
		}
	case strings.HasPrefix(k, pfxLoc) && v != nil:
		var loc locator
		json.Unmarshal(v, &loc)
		what = fmt.Sprintf("-> %s/%d", loc.Chain, loc.Seq)
	}
	if key == "" {
		key = k
	}
	if what == "" {
		return key
	}
	return key + "  " + what
}

// at is a Unix second as an offset from the test's epoch.
func (l *layout) at(unix int64) string {
	return "+" + (time.Duration(unix-l.epoch.Unix()) * time.Second).String()
}

func segments(segs []Segment) string {
	parts := make([]string, len(segs))
	for i, s := range segs {
		parts[i] = fmt.Sprintf("%s[%d,%d)", s.Chain, s.From, s.To)
	}
	return strings.Join(parts, " ")
}

func itemIDs(items []wire.Item) string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return "(" + strings.Join(ids, " ") + ")"
}
