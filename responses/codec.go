package responses

import (
	"encoding/binary"
	"errors"
)

// Items in chains are stored in a compact binary form rather than JSON:
// a turn's context is hundreds of them and decoding them is most of a
// context load. The form is a version byte, then uvarint-length-prefixed
// strings: type, id, status, role, call_id, name, arguments, output, then
// a uvarint count of content parts, each its type and text. Version 2
// adds one more string at the end, the namespace; an item without one is
// written in version 1, which every reader knows.
const (
	itemCodecV1 = 1
	itemCodecV2 = 2
)

var errItemCodec = errors.New("responses: malformed stored item")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encodeItem appends the stored form of it to b.
func encodeItem(b []byte, it *Item) []byte {
	version := byte(itemCodecV1)
	if it.Namespace != "" {
		version = itemCodecV2
	}
	b = append(b, version)
	for _, s := range [...]string{it.Type, it.ID, it.Status, it.Role, it.CallID, it.Name, it.Arguments, it.Output} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(it.Content)))
	for _, p := range it.Content {
		b = appendString(appendString(b, p.Type), p.Text)
	}
	if version == itemCodecV2 {
		b = appendString(b, it.Namespace)
	}
	return b
}

// itemDecoder reads stored items. All strings of one item share one
// allocation.
type itemDecoder struct {
	buf []byte
	s   string
	err error
}

func (d *itemDecoder) str() string {
	n, k := binary.Uvarint(d.buf)
	if k <= 0 || uint64(len(d.buf)-k) < n {
		d.err = errItemCodec
		return ""
	}
	// d.s holds the same bytes as the encoded item; slice it, no copy.
	off := len(d.s) - len(d.buf) + k
	d.buf = d.buf[k+int(n):]
	return d.s[off : off+int(n)]
}

// decodeItem reads an item written by encodeItem.
func decodeStoredItem(b []byte) (Item, error) {
	if len(b) == 0 || (b[0] != itemCodecV1 && b[0] != itemCodecV2) {
		return Item{}, errItemCodec
	}
	d := itemDecoder{buf: b[1:], s: string(b[1:])}
	it := Item{Type: d.str(), ID: d.str(), Status: d.str(), Role: d.str(), CallID: d.str(), Name: d.str(), Arguments: d.str(), Output: d.str()}
	n, k := binary.Uvarint(d.buf)
	if k <= 0 || n > uint64(len(d.buf)) {
		return Item{}, errItemCodec
	}
	d.buf = d.buf[k:]
	if n > 0 {
		it.Content = make([]ContentPart, n)
		for i := range it.Content {
			it.Content[i] = ContentPart{Type: d.str(), Text: d.str()}
		}
	}
	if b[0] == itemCodecV2 {
		it.Namespace = d.str()
	}
	return it, d.err
}
