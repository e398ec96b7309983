package responses

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// jsonStrings are the strings whose encoding differs most between JSON
// writers: quotes and backslashes, every kind of control character, HTML's
// three, the two line separators JavaScript reads as line ends, invalid
// UTF-8 (a stray continuation byte, a cut sequence, an encoded surrogate)
// and characters of two, three and four bytes.
var jsonStrings = []string{
	"", "plain text", `say "hi" \ there`, "\x00\x01\x1f\x7f", "\b\f\n\r\t",
	"<b>&amp;</b>", "line\u2028para\u2029end", "\xff", "a\x80b", "\xe2\x82", "\xed\xa0\x80",
	"é€😀", "tok\u00a0en", " 42",
}

func TestAppendJSONStringMatchesMarshal(t *testing.T) {
	for _, s := range jsonStrings {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("%q: got %s, json.Marshal %s", s, got, want)
		}
	}
}

// TestDeltaEventMatchesMarshal checks each delta event a run emits
// against json.Marshal of the same Event.
func TestDeltaEventMatchesMarshal(t *testing.T) {
	idx := 3
	var noLogprobs []string
	for _, s := range jsonStrings {
		for _, c := range []struct {
			d  delta
			ev Event
		}{
			{delta{outputIndex: 3, itemID: "msg_1", inContent: true, text: s, logprobs: true},
				Event{OutputIndex: &idx, ItemID: "msg_1", ContentIndex: &zero, Logprobs: &noLogprobs}},
			{delta{outputIndex: 3, itemID: "rs_1", inSummary: true, text: s},
				Event{OutputIndex: &idx, ItemID: "rs_1", SummaryIndex: &zero}},
			{delta{outputIndex: 0, itemID: "rs_<2>", inContent: true, text: s},
				Event{OutputIndex: &zero, ItemID: "rs_<2>", ContentIndex: &zero}},
			{delta{outputIndex: 3, itemID: "fc_1", text: s},
				Event{OutputIndex: &idx, ItemID: "fc_1"}},
			{delta{outputIndex: 3, text: s},
				Event{OutputIndex: &idx}},
		} {
			for _, seq := range []int{0, 7, 123456} {
				ev := c.ev
				ev.Type, ev.SequenceNumber, ev.Delta = "response.output_text.delta", seq, &s
				want, err := json.Marshal(&ev)
				if err != nil {
					t.Fatal(err)
				}
				if got := encodeDelta(ev.Type, seq, &c.d); string(got) != string(want) {
					t.Errorf("%+v:\n got %s\nwant %s", c.d, got, want)
				}
			}
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range jsonStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, json.Marshal %s", s, got, want)
		}
	})
}

// heldSink records the events a run sends and whether it held them.
type heldSink struct {
	held   bool
	events []Event
	writes []int // the events of each release
}

func (s *heldSink) Event(_ string, data []byte) error {
	var ev Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	s.events = append(s.events, ev)
	return nil
}

func (s *heldSink) Hold(hold bool) {
	if s.held && !hold {
		s.writes = append(s.writes, len(s.events))
	}
	s.held = hold
}

// While the sink is held, a run's deltas of one item go as one event, their
// texts joined; a delta of another item, or any other event, ends it; the
// sequence numbers stay one an event, in order; unheld, a delta a token.
func TestHeldDeltasJoin(t *testing.T) {
	sink := &heldSink{}
	r := newRun(&wire.Response{}, nil, sink, 5)
	hold := func() { sink.Hold(true); r.holding = true }
	hold()
	r.reasoningDelta("think")
	r.reasoningDelta("ing")
	r.textDelta("Hel")
	r.textDelta("lo")
	r.release(sink)
	r.textDelta(",")
	r.textDelta(" world")
	hold()
	r.textDelta("!")
	r.textDelta("!")
	r.release(sink)

	type got struct{ typ, delta string }
	var deltas []got
	for i, ev := range sink.events {
		if ev.SequenceNumber != 5+i {
			t.Errorf("event %d (%s) numbered %d, want %d", i, ev.Type, ev.SequenceNumber, 5+i)
		}
		if ev.Delta != nil {
			deltas = append(deltas, got{ev.Type, *ev.Delta})
		}
	}
	want := []got{
		{"response.reasoning_text.delta", "thinking"},
		{"response.output_text.delta", "Hello"},
		{"response.output_text.delta", ","},
		{"response.output_text.delta", " world"},
		{"response.output_text.delta", "!!"},
	}
	if !slices.Equal(deltas, want) {
		t.Errorf("deltas %q, want %q", deltas, want)
	}
	if r.pending.on || r.seq != 5+len(sink.events) {
		t.Errorf("after the releases: a delta pending %v, next number %d after %d events", r.pending.on, r.seq, len(sink.events))
	}
}

// A call's arguments streamed in many deltas are its whole arguments, and
// the next call's start empty; each done event carries its call's.
func TestCallArgumentsAcrossDeltas(t *testing.T) {
	sink := &heldSink{}
	r := newRun(&wire.Response{}, nil, sink, 0)
	var first, second strings.Builder
	r.callDelta(0, "call_a", "read", "")
	for i := range 500 {
		piece := fmt.Sprintf(`{"n":%d}`, i)
		first.WriteString(piece)
		r.callDelta(0, "", "", piece)
	}
	r.callDelta(1, "call_b", "write", `{"path":`)
	r.callDelta(1, "", "", `"x"}`)
	second.WriteString(`{"path":"x"}`)
	r.closeOpen(wire.StatusCompleted)

	out := r.resp.Output
	if len(out) != 2 || out[0].Arguments != first.String() || out[1].Arguments != second.String() {
		t.Fatalf("items %d, arguments %.40q… and %q, want %.40q… and %q", len(out), out[0].Arguments, out[1].Arguments, first.String(), second.String())
	}
	var done []string
	for _, ev := range sink.events {
		if ev.Type == "response.function_call_arguments.done" {
			done = append(done, *ev.Arguments)
		}
	}
	if !slices.Equal(done, []string{first.String(), second.String()}) {
		t.Errorf("done events carry %.60q", done)
	}
}

// A call an engine numbers -1 is not taken for the open message: the
// message keeps its text and the call is an item of its own.
func TestNegativeCallIndexOpensACall(t *testing.T) {
	r := newRun(&wire.Response{}, nil, &heldSink{}, 0)
	r.textDelta("Hello")
	r.callDelta(-1, "call_a", "read", `{"path":"x"}`)
	r.closeOpen(wire.StatusCompleted)
	out := r.resp.Output
	if len(out) != 2 || out[0].Content[0].Text != "Hello" || out[1].Type != wire.ItemFunctionCall || out[1].Arguments != `{"path":"x"}` {
		t.Fatalf("output %+v", out)
	}
}
