package responses

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// A streamed answer is mostly delta events, one a token, and building an
// Event for each and encoding it through encoding/json's reflection was
// a fifth of what the gateway spent on a Responses stream
// (BenchmarkStreamBurst/responses). The deltas are written by hand
// instead, byte for byte as json.Marshal writes the same Event
// (TestDeltaEventMatchesMarshal, FuzzAppendJSONString).

// delta is a delta event's members past its type and sequence number, in
// the order the Event's JSON has them. Its zero value has neither a
// content nor a summary index: a delta of a part says which it is in.
type delta struct {
	outputIndex int
	itemID      string
	// inContent writes "content_index":0, inSummary "summary_index":0:
	// the one part a message or reasoning item streams into.
	inContent, inSummary bool
	text                 string
	// logprobs writes "logprobs":null, as output_text deltas carry it.
	logprobs bool
}

// emitDelta is emit for a delta event. While consume holds the sink (the
// events go out in one write), a delta that continues the last one (same
// type, same item) is joined to it instead: the client gets one event for
// the text that arrived together, as it would join the texts anyway, and
// the gateway encodes and writes one.
func (r *run) emitDelta(typ string, d delta) {
	p := &r.pending
	if r.holding && r.sink != nil {
		if p.on && p.typ == typ && p.d.outputIndex == d.outputIndex && p.d.itemID == d.itemID {
			p.text.WriteString(d.text)
			return
		}
		r.flushDelta()
		p.on, p.typ, p.d = true, typ, d
		p.text.WriteString(d.text)
		return
	}
	r.flushDelta()
	if seq, listened := r.number(); listened {
		r.send(typ, encodeDelta(typ, seq, &d))
	}
}

// pendingDelta is the delta event a held sink has yet to get, its text
// the deltas' joined.
type pendingDelta struct {
	on   bool
	typ  string
	d    delta
	text strings.Builder
}

// flushDelta sends the pending delta, if any, numbered next.
func (r *run) flushDelta() {
	p := &r.pending
	if !p.on {
		return
	}
	p.on = false
	d := p.d
	d.text = p.text.String()
	p.text.Reset()
	if seq, listened := r.number(); listened {
		r.send(p.typ, encodeDelta(p.typ, seq, &d))
	}
}

// encodeDelta encodes the delta event typ, number seq, as json.Marshal
// would encode its Event.
func encodeDelta(typ string, seq int, d *delta) []byte {
	b := make([]byte, 0, 112+len(typ)+len(d.itemID)+len(d.text)+len(d.text)/8)
	b = append(b, `{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"sequence_number":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = strconv.AppendInt(append(b, `,"output_index":`...), int64(d.outputIndex), 10)
	if d.itemID != "" {
		b = append(b, `,"item_id":`...)
		b = appendJSONString(b, d.itemID)
	}
	if d.inContent {
		b = append(b, `,"content_index":0`...)
	}
	if d.inSummary {
		b = append(b, `,"summary_index":0`...)
	}
	b = append(b, `,"delta":`...)
	b = appendJSONString(b, d.text)
	if d.logprobs {
		b = append(b, `,"logprobs":null`...)
	}
	return append(b, '}')
}

// jsonStringLen is len(appendJSONString(nil, s)), found without
// writing it.
func jsonStringLen(s string) int {
	n := len(s) + 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&':
			case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
				n++
			default:
				n += 5
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += len(`\ufffd`) - 1
		case r == '\u2028' || r == '\u2029':
			n += len(`\u2028`) - size
		}
		i += size
	}
	return n
}

// appendJSONString appends s as a JSON string the way json.Marshal
// writes one: HTML's <, > and & escaped, as are U+2028 and U+2029, and
// invalid UTF-8 replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
