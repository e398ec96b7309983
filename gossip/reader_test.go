package gossip

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestReader: fields read back as written; the first short read fails the
// reader, and every read after it returns zeros.
func TestReader(t *testing.T) {
	msg := []byte{7}
	msg = binary.AppendUvarint(msg, 300)
	msg = binary.AppendVarint(msg, -5)
	msg = binary.AppendUvarint(msg, 3)
	msg = append(msg, "abc"...)
	msg = binary.AppendUvarint(msg, 2) // a count of two 4-byte items
	msg = append(msg, "12345678tail"...)

	r := NewReader(msg)
	if b, u, v, s := r.Byte(), r.Uvarint(), r.Varint(), r.Bytes(); b != 7 || u != 300 || v != -5 || string(s) != "abc" {
		t.Fatalf("read %d %d %d %q", b, u, v, s)
	}
	if n := r.Count(4); n != 2 || string(r.Take(8)) != "12345678" || string(r.Rest()) != "tail" || r.Len() != 0 || !r.OK() {
		t.Fatalf("count %d, %d left, ok %v", n, r.Len(), r.OK())
	}

	// A count the rest cannot hold fails, and so does everything after.
	r = NewReader(binary.AppendUvarint(nil, 9))
	if n := r.Count(1); n != 0 || r.OK() {
		t.Fatalf("count %d, ok %v: want 0 and failed", n, r.OK())
	}
	if u, s, b := r.Uvarint(), r.Bytes(), r.Take(2); u != 0 || bytes.ContainsFunc(s, func(c rune) bool { return c != 0 }) || !bytes.Equal(b, make([]byte, 8)) || r.Byte() != 0 {
		t.Fatalf("after a failure: %d %q %v", u, s, b)
	}

	// A field the decoder refuses fails the reader too.
	r = NewReader([]byte{1, 2})
	r.Fail()
	if r.OK() || r.Len() != 0 || r.Byte() != 0 {
		t.Fatal("Fail left the reader readable")
	}
}
