package gossip

import "encoding/binary"

// Reader reads a message from another gateway field by field: bytes,
// unsigned and signed varints, counts and length-prefixed byte strings,
// each checked against what is left. The first short or bad read marks it
// failed (OK is false), and every read after returns zeros, so a decoder
// reads on and checks OK once at the end. The bytes it returns alias the
// message.
type Reader struct {
	b   []byte
	bad bool
}

// NewReader reads msg.
func NewReader(msg []byte) *Reader { return &Reader{b: msg} }

// OK reports whether every read so far succeeded.
func (r *Reader) OK() bool { return !r.bad }

// Fail marks the message bad, for a field the decoder itself refuses.
func (r *Reader) Fail() {
	r.bad = true
	r.b = nil
}

// Len is how many bytes are left.
func (r *Reader) Len() int { return len(r.b) }

// Rest returns the bytes left, all of them.
func (r *Reader) Rest() []byte {
	s := r.b
	r.b = r.b[len(r.b):]
	return s
}

// Take returns the next n bytes. After a failure it returns eight zero
// bytes whatever n asked: a fixed-size read of up to eight stays in
// range, and a length read off a bad message allocates nothing of its
// size (variable lengths go through Bytes, which Count bounds).
func (r *Reader) Take(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.Fail()
		return make([]byte, 8)
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

// Byte returns the next byte.
func (r *Reader) Byte() byte { return r.Take(1)[0] }

// Uvarint returns the next unsigned varint.
func (r *Reader) Uvarint() uint64 { return next(r, binary.Uvarint) }

// Varint returns the next signed varint.
func (r *Reader) Varint() int64 { return next(r, binary.Varint) }

// next reads one varint with read.
func next[T uint64 | int64](r *Reader, read func([]byte) (T, int)) T {
	if r.bad {
		return 0
	}
	v, n := read(r.b)
	if n <= 0 {
		r.Fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Count returns the next unsigned varint as a count of items of at least
// minSize bytes each, refusing one that what is left cannot hold: a bound
// before anything is allocated for them.
func (r *Reader) Count(minSize int) int {
	v := r.Uvarint()
	if v > uint64(len(r.b)/minSize) {
		r.Fail()
		return 0
	}
	return int(v)
}

// Bytes returns the next byte string, its length an unsigned varint
// before it.
func (r *Reader) Bytes() []byte { return r.Take(r.Count(1)) }
