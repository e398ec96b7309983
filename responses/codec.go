package responses

import (
	"encoding/binary"
	"errors"

	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/state"
)

// Items in chains are stored in a compact binary form rather than JSON:
// a turn's context is hundreds of them and decoding them is most of a
// context load. The form is a version byte, then uvarint-length-prefixed
// strings: type, id, status, role, call_id, name, arguments, output, then
// a uvarint count of content parts, each its type and text. Version 2
// adds one more string at the end, the namespace; an item without one is
// written in version 1, which every reader knows. Version 3 (reasoning
// and compaction items) adds after the namespace the encrypted content
// and a uvarint count of summary parts, each its type and text.
const (
	itemCodecV1 = 1
	itemCodecV2 = 2
	itemCodecV3 = 3
	// itemCodecV4 (MCP items) adds server label, error, approval
	// request id and approve ("", "1" or "0").
	itemCodecV4 = 4
)

var approved, denied = true, false

var errItemCodec = errors.New("responses: malformed stored item")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendParts(b []byte, parts []wire.ContentPart) []byte {
	b = binary.AppendUvarint(b, uint64(len(parts)))
	for _, p := range parts {
		b = appendString(appendString(b, p.Type), p.Text)
	}
	return b
}

// itemVersion is the oldest version of the stored form that holds it.
func itemVersion(it *wire.Item) byte {
	switch {
	case it.ServerLabel != "" || it.Error != "" || it.ApprovalRequestID != "" || it.Approve != nil:
		return itemCodecV4
	case it.EncryptedContent != "" || len(it.Summary) > 0:
		return itemCodecV3
	case it.Namespace != "":
		return itemCodecV2
	}
	return itemCodecV1
}

// approval is the stored form of it.Approve.
func approval(it *wire.Item) string {
	switch {
	case it.Approve == nil:
		return ""
	case *it.Approve:
		return "1"
	}
	return "0"
}

// encodeItem appends the stored form of it to b; encodedItemLen says
// how long it is.
func encodeItem(b []byte, it *wire.Item) []byte {
	version := itemVersion(it)
	b = append(b, version)
	for _, s := range [...]string{it.Type, it.ID, it.Status, it.Role, it.CallID, it.Name, it.Arguments, it.Output} {
		b = appendString(b, s)
	}
	b = appendParts(b, it.Content)
	if version >= itemCodecV2 {
		b = appendString(b, it.Namespace)
	}
	if version >= itemCodecV3 {
		b = appendString(b, it.EncryptedContent)
		b = appendParts(b, it.Summary)
	}
	if version == itemCodecV4 {
		for _, s := range [...]string{it.ServerLabel, it.Error, it.ApprovalRequestID, approval(it)} {
			b = appendString(b, s)
		}
	}
	return b
}

// encodedItemLen is the length of encodeItem's form of it, counted as
// encodeItem writes it.
func encodedItemLen(it *wire.Item) int {
	version := itemVersion(it)
	n := 1
	for _, s := range [...]string{it.Type, it.ID, it.Status, it.Role, it.CallID, it.Name, it.Arguments, it.Output} {
		n += stringLen(s)
	}
	n += partsLen(it.Content)
	if version >= itemCodecV2 {
		n += stringLen(it.Namespace)
	}
	if version >= itemCodecV3 {
		n += stringLen(it.EncryptedContent) + partsLen(it.Summary)
	}
	if version == itemCodecV4 {
		for _, s := range [...]string{it.ServerLabel, it.Error, it.ApprovalRequestID, approval(it)} {
			n += stringLen(s)
		}
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

func stringLen(s string) int { return uvarintLen(uint64(len(s))) + len(s) }

func partsLen(parts []wire.ContentPart) int {
	n := uvarintLen(uint64(len(parts)))
	for _, p := range parts {
		n += stringLen(p.Type) + stringLen(p.Text)
	}
	return n
}

// storedItem is an item to store, written by the state store straight
// into its batch: a large item is not encoded into a buffer of its own
// first and copied.
type storedItem struct{ it *wire.Item }

func (s storedItem) Len() int                 { return encodedItemLen(s.it) }
func (s storedItem) AppendTo(b []byte) []byte { return encodeItem(b, s.it) }

var _ state.Value = storedItem{}

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

// parts reads a count of content parts and the parts; nil for none.
func (d *itemDecoder) parts() []wire.ContentPart {
	if d.err != nil {
		return nil
	}
	n, k := binary.Uvarint(d.buf)
	if k <= 0 || n > uint64(len(d.buf)) {
		d.err = errItemCodec
		return nil
	}
	d.buf = d.buf[k:]
	if n == 0 {
		return nil
	}
	parts := make([]wire.ContentPart, n)
	for i := range parts {
		parts[i] = wire.ContentPart{Type: d.str(), Text: d.str()}
	}
	return parts
}

// storedCompaction reports whether b, written by encodeItem, is a
// compaction item, reading its type alone: a pass that looks for one
// decodes nothing. A malformed item is not one; decoding it fails.
func storedCompaction(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < n {
		return false
	}
	return string(b[1+k:1+k+int(n)]) == wire.ItemCompaction
}

// decodeStoredItem reads an item written by encodeItem.
func decodeStoredItem(b []byte) (wire.Item, error) {
	if len(b) == 0 || b[0] < itemCodecV1 || b[0] > itemCodecV4 {
		return wire.Item{}, errItemCodec
	}
	d := itemDecoder{buf: b[1:], s: string(b[1:])}
	it := wire.Item{Type: d.str(), ID: d.str(), Status: d.str(), Role: d.str(), CallID: d.str(), Name: d.str(), Arguments: d.str(), Output: d.str()}
	it.Content = d.parts()
	if b[0] >= itemCodecV2 {
		it.Namespace = d.str()
	}
	if b[0] >= itemCodecV3 {
		it.EncryptedContent = d.str()
		it.Summary = d.parts()
	}
	if b[0] == itemCodecV4 {
		it.ServerLabel, it.Error, it.ApprovalRequestID = d.str(), d.str(), d.str()
		switch d.str() {
		case "1":
			it.Approve = &approved
		case "0":
			it.Approve = &denied
		case "":
		default:
			d.err = errItemCodec
		}
	}
	if d.err != nil {
		return wire.Item{}, d.err
	}
	return it, nil
}
