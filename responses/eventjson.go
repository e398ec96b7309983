package responses

import (
	"strconv"
	"unicode/utf8"
)

// A streamed answer is mostly delta events, one a token, and building an
// Event for each and encoding it through encoding/json's reflection was
// a fifth of what the gateway spent on a Responses stream
// (BenchmarkStreamBurst/responses). The deltas are written by hand
// instead, byte for byte as json.Marshal writes the same Event
// (TestDeltaEventMatchesMarshal, FuzzAppendJSONString).

// delta is a delta event's members past its type and sequence number, in
// the order the Event's JSON has them. An index below zero is absent.
type delta struct {
	outputIndex  int
	itemID       string
	contentIndex int
	summaryIndex int
	text         string
	// logprobs writes "logprobs":null, as output_text deltas carry it.
	logprobs bool
}

// emitDelta is emit for a delta event.
func (r *run) emitDelta(typ string, d delta) {
	seq := r.seq
	r.seq++
	if r.sink == nil {
		return
	}
	if r.sink.Event(typ, appendDelta(nil, typ, seq, &d)) != nil {
		r.sink = nil
	}
}

// appendDelta appends the delta event typ, number seq, as json.Marshal
// would encode its Event.
func appendDelta(b []byte, typ string, seq int, d *delta) []byte {
	if b == nil {
		b = make([]byte, 0, 112+len(typ)+len(d.itemID)+len(d.text)+len(d.text)/8)
	}
	b = append(b, `{"type":`...)
	b = appendJSONString(b, typ)
	b = append(b, `,"sequence_number":`...)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = appendIndex(b, `,"output_index":`, d.outputIndex)
	if d.itemID != "" {
		b = append(b, `,"item_id":`...)
		b = appendJSONString(b, d.itemID)
	}
	b = appendIndex(b, `,"content_index":`, d.contentIndex)
	b = appendIndex(b, `,"summary_index":`, d.summaryIndex)
	b = append(b, `,"delta":`...)
	b = appendJSONString(b, d.text)
	if d.logprobs {
		b = append(b, `,"logprobs":null`...)
	}
	return append(b, '}')
}

func appendIndex(b []byte, key string, v int) []byte {
	if v < 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), int64(v), 10)
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
