package jsonscan

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// maxDepth is how deeply arrays and objects may nest, counting the
// document's own value: encoding/json's limit, so that both refuse the
// same documents.
const maxDepth = 10000

// Decoder reads one JSON document front to back, from Off. It accepts
// exactly what encoding/json accepts: the JSON grammar, no control
// characters in strings, nesting to encoding/json's depth limit, nothing
// but white space after the value. Strings come out as encoding/json makes
// them, escapes decoded and bytes that are not UTF-8 replaced by U+FFFD.
//
// A string with nothing to decode is not copied: it aliases Data, which
// must therefore outlive what the decoder returns and never change. The
// others are decoded into a buffer shared by the whole document, so that
// a document full of escaped strings costs a few allocations, not one a
// string.
//
// A reader of a document's grammar (a request parser) embeds a Decoder
// and walks the document with its methods: each reads the value, key or
// punctuation at Off and leaves Off past it. The zero Decoder with Data
// set reads Data from its start.
type Decoder struct {
	// Data is the document.
	Data []byte
	// Off is where the next read starts.
	Off int
	// Skims tells that much of Data may be skipped unread (by a reader
	// that moves Off past parts it has read before), so that the buffer
	// of decoded strings is not sized for all of it.
	Skims bool

	depth int
	text  []byte
}

// SyntaxError is a document that is not valid JSON.
type SyntaxError struct {
	// Offset is the byte at fault, or the document's length where it
	// ends too soon.
	Offset int
	fault  fault
	c      byte // the byte at fault, for badByte
}

type fault uint8

const (
	badByte fault = iota
	tooShort
	tooDeep
)

// Error is Reason, prefixed with the package.
func (e *SyntaxError) Error() string { return "jsonscan: " + e.Reason() }

// Reason says what is wrong in encoding/json's words: "unexpected end of
// JSON input", "invalid character 'x' at offset 7", "exceeded max depth
// at offset 7".
func (e *SyntaxError) Reason() string {
	switch e.fault {
	case tooShort:
		return "unexpected end of JSON input"
	case tooDeep:
		return "exceeded max depth at offset " + strconv.Itoa(e.Offset)
	}
	return "invalid character " + strconv.QuoteRune(rune(e.c)) + " at offset " + strconv.Itoa(e.Offset)
}

// SyntaxError is the error for the byte at Off, or for the end of Data.
// It is kept out of line: inlined, the cold path of every read would
// crowd the hot one.
//
//go:noinline
func (d *Decoder) SyntaxError() error {
	if d.Off >= len(d.Data) {
		return &SyntaxError{Offset: len(d.Data), fault: tooShort}
	}
	return &SyntaxError{Offset: d.Off, fault: badByte, c: d.Data[d.Off]}
}

// Peek is the byte at Off, or 0, which starts no JSON value, at the end.
func (d *Decoder) Peek() byte {
	if d.Off < len(d.Data) {
		return d.Data[d.Off]
	}
	return 0
}

// SkipSpace moves Off past white space.
func (d *Decoder) SkipSpace() {
	for d.Off < len(d.Data) {
		switch d.Data[d.Off] {
		case ' ', '\t', '\n', '\r':
			d.Off++
		default:
			return
		}
	}
}

// End checks that nothing but white space follows the document's value.
func (d *Decoder) End() error {
	d.SkipSpace()
	if d.Off != len(d.Data) {
		return d.SyntaxError()
	}
	return nil
}

// EnterObject consumes the '{' at Off and reports whether a member
// follows; if one does, Off is at its key.
func (d *Decoder) EnterObject() (bool, error) {
	return d.enter('}')
}

// EnterArray consumes the '[' at Off and reports whether an element
// follows; if one does, Off is at it.
func (d *Decoder) EnterArray() (bool, error) {
	return d.enter(']')
}

func (d *Decoder) enter(closing byte) (bool, error) {
	d.depth++
	if d.depth > maxDepth {
		return false, &SyntaxError{Offset: d.Off, fault: tooDeep}
	}
	d.Off++
	d.SkipSpace()
	if d.Peek() == closing {
		d.Off++
		d.depth--
		return false, nil
	}
	return true, nil
}

// Key reads a member's key and the colon after it, leaving Off at the
// value. The key is unquoted when it has to be; bytes of it that are not
// UTF-8 are kept as they are.
func (d *Decoder) Key() ([]byte, error) {
	if j := d.ShortString(false); j >= 0 && j+1 < len(d.Data) && d.Data[j+1] == ':' {
		k := d.Data[d.Off+1 : j]
		d.Off = j + 2
		d.SkipSpace()
		return k, nil
	}
	if d.Peek() != '"' {
		return nil, d.SyntaxError()
	}
	keyOff := d.Off
	start, end, escaped, err := d.SkipString()
	if err != nil {
		return nil, err
	}
	k := d.Data[start:end]
	if escaped {
		// Rare: decode it again, the slow way.
		d.Off = keyOff
		s, err := d.decodeString(keyOff+1, keyOff+1)
		if err != nil {
			return nil, err
		}
		k = unsafe.Slice(unsafe.StringData(s), len(s))
	}
	d.SkipSpace()
	if d.Peek() != ':' {
		return nil, d.SyntaxError()
	}
	d.Off++
	d.SkipSpace()
	return k, nil
}

// Members reads the object at Off, calling member for each member with
// its key and Off at its value, which member must read.
func (d *Decoder) Members(member func(key []byte) error) error {
	more, err := d.EnterObject()
	for more && err == nil {
		var k []byte
		if k, err = d.Key(); err == nil {
			err = member(k)
		}
		if err == nil {
			more, err = d.NextMember()
		}
	}
	return err
}

// Elements reads the array at Off, calling element for each element with
// its index and Off at it, which element must read.
func (d *Decoder) Elements(element func(i int) error) error {
	more, err := d.EnterArray()
	for i := 0; more && err == nil; i++ {
		if err = element(i); err == nil {
			more, err = d.NextElement()
		}
	}
	return err
}

// NextMember consumes what follows a member's value: a comma, reporting
// that another member follows, or the closing brace.
func (d *Decoder) NextMember() (bool, error) {
	return d.next('}')
}

// NextElement consumes what follows an element: a comma, reporting that
// another element follows, or the closing bracket.
func (d *Decoder) NextElement() (bool, error) {
	return d.next(']')
}

func (d *Decoder) next(closing byte) (bool, error) {
	d.SkipSpace()
	switch d.Peek() {
	case ',':
		d.Off++
		d.SkipSpace()
		return true, nil
	case closing:
		d.Off++
		d.depth--
		return false, nil
	}
	return false, d.SyntaxError()
}

// Skip reads over the value at Off, checking it.
func (d *Decoder) Skip() error {
	switch c := d.Peek(); c {
	case '"':
		if j := d.ShortString(false); j >= 0 {
			d.Off = j + 1
			return nil
		}
		_, _, _, err := d.SkipString()
		return err
	case '{':
		more, err := d.EnterObject()
		for more && err == nil {
			if err = d.rawKey(); err != nil {
				return err
			}
			if err = d.Skip(); err != nil {
				return err
			}
			more, err = d.NextMember()
		}
		return err
	case '[':
		more, err := d.EnterArray()
		for more && err == nil {
			if err = d.Skip(); err != nil {
				return err
			}
			more, err = d.NextElement()
		}
		return err
	case 't':
		return d.Literal("true")
	case 'f':
		return d.Literal("false")
	case 'n':
		return d.Literal("null")
	}
	_, _, err := d.Number()
	return err
}

// rawKey is key for a value that is skipped: the key is checked, not
// unquoted.
func (d *Decoder) rawKey() error {
	if j := d.ShortString(false); j >= 0 && j+1 < len(d.Data) && d.Data[j+1] == ':' {
		d.Off = j + 2
		d.SkipSpace()
		return nil
	}
	if d.Peek() != '"' {
		return d.SyntaxError()
	}
	if _, _, _, err := d.SkipString(); err != nil {
		return err
	}
	d.SkipSpace()
	if d.Peek() != ':' {
		return d.SyntaxError()
	}
	d.Off++
	d.SkipSpace()
	return nil
}

// Literal reads word (true, false or null) at Off.
func (d *Decoder) Literal(word string) error {
	if len(d.Data)-d.Off >= len(word) && string(d.Data[d.Off:d.Off+len(word)]) == word {
		d.Off += len(word)
		return nil
	}
	// Point at the first byte that differs, or at the end.
	for i := 0; d.Off < len(d.Data) && d.Data[d.Off] == word[i]; i++ {
		d.Off++
	}
	return d.SyntaxError()
}

// Number reads the number at Off, -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?,
// and returns its text and whether it has neither fraction nor exponent.
func (d *Decoder) Number() (num []byte, integer bool, err error) {
	start := d.Off
	if d.Peek() == '-' {
		d.Off++
	}
	switch c := d.Peek(); {
	case c == '0':
		d.Off++
	case '1' <= c && c <= '9':
		d.digits()
	default:
		return nil, false, d.SyntaxError()
	}
	integer = true
	if d.Peek() == '.' {
		d.Off++
		if !isDigit(d.Peek()) {
			return nil, false, d.SyntaxError()
		}
		d.digits()
		integer = false
	}
	if c := d.Peek(); c == 'e' || c == 'E' {
		d.Off++
		if c := d.Peek(); c == '+' || c == '-' {
			d.Off++
		}
		if !isDigit(d.Peek()) {
			return nil, false, d.SyntaxError()
		}
		d.digits()
		integer = false
	}
	return d.Data[start:d.Off], integer, nil
}

func (d *Decoder) digits() {
	for d.Off < len(d.Data) && isDigit(d.Data[d.Off]) {
		d.Off++
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// The string scanners cross plain runs, most of a chat body, eight bytes at a
// step. Each load is a little-endian word, the first byte in the low bits,
// and a stop mask marks, in the top bit of each byte, where a run ends.
// Only a mask's lowest mark is exact (a borrow can mark bytes above it),
// and only the lowest is used.

// syntaxStops marks the bytes a string must be checked at: a quote, a
// backslash, a control character. Each test subtracts and looks for a
// byte that went below zero; all three leave out bytes with the top bit
// set, which are none of them.
func syntaxStops(x uint64) uint64 {
	q := x ^ (lsb * '"')
	b := x ^ (lsb * '\\')
	return ((q - lsb) | (b - lsb) | (x - lsb*0x20)) &^ x & msb
}

// textStops adds to syntaxStops the bytes that are not ASCII, where a
// decoded string must check its UTF-8.
func textStops(x uint64) uint64 {
	q := x ^ (lsb * '"')
	b := x ^ (lsb * '\\')
	return ((q - lsb) | (b - lsb) | (x - lsb*0x20) | x) & msb
}

// textRun is the index of the first byte at or after i that textStops
// would mark, or len(data).
func textRun(data []byte, i int) int {
	for ; i+8 <= len(data); i += 8 {
		if m := textStops(binary.LittleEndian.Uint64(data[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(data); i++ {
		if c := data[i]; c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
	}
	return i
}

// SkipString reads over the string at Off (the opening quote), checking
// it, and returns the bounds of its contents and whether it has escapes.
// Bytes that are not UTF-8 are no syntax error, so it does not look at them.
func (d *Decoder) SkipString() (start, end int, escaped bool, err error) {
	data := d.Data
	start = d.Off + 1
	i := start
	for {
		if i+8 <= len(data) {
			m := syntaxStops(binary.LittleEndian.Uint64(data[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		} else {
			for i < len(data) && data[i] != '"' && data[i] != '\\' && data[i] >= 0x20 {
				i++
			}
			if i >= len(data) {
				d.Off = i
				return 0, 0, false, d.SyntaxError()
			}
		}
		// In a prompt most stops are escapes; test for them first.
		if c := data[i]; c == '\\' {
			if !escaped {
				// A string with one escape is likely to have many.
				escaped = true
				var done bool
				if i, done, err = d.skipBlocks(i); err != nil || done {
					return start, i, true, err
				}
				continue
			}
			if i+1 < len(data) && unescaped[data[i+1]] != 0 {
				i += 2
				continue
			}
			n := escapeLen(data[i:])
			if n <= 0 {
				d.Off = i - n
				return 0, 0, false, d.SyntaxError()
			}
			i += n
			continue
		} else if c == '"' {
			d.Off = i + 1
			return start, i, escaped, nil
		}
		d.Off = i
		return 0, 0, false, d.SyntaxError()
	}
}

// unescaped maps the byte after a backslash to the byte the escape stands
// for, or to 0 where the escape is not one of those.
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escapeLen is the length of the escape at the start of s, or, when it
// is not one, minus the offset of the byte at fault.
func escapeLen(s []byte) int {
	if len(s) < 2 {
		return -len(s)
	}
	switch s[1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		for i := 2; i < 6; i++ {
			if i >= len(s) || hexValue(s[i]) < 0 {
				return -i
			}
		}
		return 6
	}
	return -1
}

func hexValue(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// Hex4 is the value of the \uXXXX escape at the start of s, or -1 when s
// does not start with one.
func Hex4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		v := hexValue(c)
		if v < 0 {
			return -1
		}
		r = r<<4 | v
	}
	return r
}

// ShortString is the index of the closing quote of the string at Off when
// it is at most 15 bytes long and plain: no escape, no control character
// and, with text, only ASCII. Otherwise it is -1. Most keys and many values
// are such strings, and two word tests find their end.
func (d *Decoder) ShortString(text bool) int {
	data := d.Data
	i := d.Off + 1
	if i+16 > len(data) || data[d.Off] != '"' {
		return -1
	}
	le := binary.LittleEndian
	x := le.Uint64(data[i:])
	m := syntaxStops(x)
	if text {
		m |= x & msb
	}
	if m == 0 {
		i += 8
		x = le.Uint64(data[i:])
		if m = syntaxStops(x); text {
			m |= x & msb
		}
		if m == 0 {
			return -1
		}
	}
	if j := i + bits.TrailingZeros64(m)>>3; data[j] == '"' {
		return j
	}
	return -1
}

// Str reads the string at Off, as encoding/json decodes it. A string that
// needs no decoding is returned aliasing Data; the first escape or stray
// byte hands the rest to decodeString.
func (d *Decoder) Str() (string, error) {
	data := d.Data
	start := d.Off + 1
	if j := d.ShortString(true); j >= 0 {
		d.Off = j + 1
		if j == start {
			return "", nil
		}
		return unsafe.String(&data[start], j-start), nil
	}
	for i := start; ; {
		i = textRun(data, i)
		if i >= len(data) {
			d.Off = i
			return "", d.SyntaxError()
		}
		switch c := data[i]; {
		case c == '"':
			d.Off = i + 1
			if i == start {
				return "", nil
			}
			return unsafe.String(&data[start], i-start), nil
		case c == '\\':
			return d.decodeString(start, i)
		case c < 0x20:
			d.Off = i
			return "", d.SyntaxError()
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return d.decodeString(start, i)
		}
		i += size
	}
}

// decodeString decodes the string whose contents start at start, plain up
// to i, into text, checking it as it goes. Escapes are decoded as
// encoding/json does: a lone or misordered surrogate becomes U+FFFD, and
// so does each byte that is not part of a UTF-8 sequence. The plain runs
// between are copied a word at a time, the word stored whole before the
// stop in it is looked at: the buffer keeps room for that.
func (d *Decoder) decodeString(start, i int) (string, error) {
	const slack = 16 // a word, or a rune, with margin
	data := d.Data
	buf := d.room(nil, i-start+slack)
	w := copy(buf, data[start:i])
	buf, w, i, done, err := d.decodeBlocks(buf, w, i)
	if err != nil {
		return "", err
	}
	if done {
		d.text = d.text[:len(d.text)+w]
		return unsafe.String(&buf[0], w), nil
	}
	for {
		if len(buf)-w < slack {
			buf = d.room(buf[:w], len(buf)+slack)
		}
		if i+8 <= len(data) {
			x := binary.LittleEndian.Uint64(data[i:])
			binary.LittleEndian.PutUint64(buf[w:], x)
			m := textStops(x)
			if m == 0 {
				i += 8
				w += 8
				continue
			}
			k := bits.TrailingZeros64(m) >> 3
			i += k
			w += k
		} else if i >= len(data) {
			d.Off = i
			return "", d.SyntaxError()
		}
		c := data[i]
		if c == '\\' && i+1 < len(data) {
			// In a prompt most stops are escapes; test for them first.
			if e := unescaped[data[i+1]]; e != 0 {
				buf[w] = e
				w++
				i += 2
				continue
			}
			if n := escapeLen(data[i:]); n <= 0 {
				d.Off = i - n
				return "", d.SyntaxError()
			}
			r := Hex4(data[i:])
			i += 6
			if utf16.IsSurrogate(r) {
				if dec := utf16.DecodeRune(r, Hex4(data[i:])); dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			w += utf8.EncodeRune(buf[w:], r)
			continue
		}
		switch {
		case c == '"':
			d.Off = i + 1
			d.text = d.text[:len(d.text)+w]
			return unsafe.String(&buf[0], w), nil
		case c < 0x20 || c == '\\':
			d.Off = i
			if c == '\\' {
				d.Off++
			}
			return "", d.SyntaxError()
		case c < utf8.RuneSelf:
			// A plain byte of the tail shorter than a word.
			buf[w] = c
			w++
			i++
		default:
			r, size := utf8.DecodeRune(data[i:])
			w += utf8.EncodeRune(buf[w:], r)
			i += size
		}
	}
}

// Long strings with escapes are read 64 bytes at a step: the stops of a
// block are found first, as a bit mask, and then visited in order. Visiting
// a stop takes no branch that depends on where it falls, so prompts where
// an escape comes every few bytes (source code, JSON in a string) are not
// slowed by a mispredicted branch for each. The mask is built from the
// same word tests as the word loops, so it can mark plain bytes too,
// which are passed over.

// A block is read through an array of window bytes from its start, so
// that indexes need no bounds checks: a stop's escape may run past the
// block, and runs are copied whole words at a time. It is decoded into an
// array of blockOut bytes: room for a block of stray bytes, each a
// three-byte U+FFFD, and a word.
const (
	window   = 128
	blockOut = 4 * 64
)

// gather packs the top bit of each byte of m into the byte's bit of the
// result's low byte.
func gather(m uint64) uint64 { return (m >> 7) * 0x0102040810204080 >> 56 }

func syntaxMask(b *[64]byte) uint64 {
	le := binary.LittleEndian
	return gather(syntaxStops(le.Uint64(b[0:]))) |
		gather(syntaxStops(le.Uint64(b[8:])))<<8 |
		gather(syntaxStops(le.Uint64(b[16:])))<<16 |
		gather(syntaxStops(le.Uint64(b[24:])))<<24 |
		gather(syntaxStops(le.Uint64(b[32:])))<<32 |
		gather(syntaxStops(le.Uint64(b[40:])))<<40 |
		gather(syntaxStops(le.Uint64(b[48:])))<<48 |
		gather(syntaxStops(le.Uint64(b[56:])))<<56
}

func textMask(b *[64]byte) uint64 {
	le := binary.LittleEndian
	return gather(textStops(le.Uint64(b[0:]))) |
		gather(textStops(le.Uint64(b[8:])))<<8 |
		gather(textStops(le.Uint64(b[16:])))<<16 |
		gather(textStops(le.Uint64(b[24:])))<<24 |
		gather(textStops(le.Uint64(b[32:])))<<32 |
		gather(textStops(le.Uint64(b[40:])))<<40 |
		gather(textStops(le.Uint64(b[48:])))<<48 |
		gather(textStops(le.Uint64(b[56:])))<<56
}

// skipBlocks checks a string from i by blocks while a window fits in
// data. It returns where the word loop goes on, or, done, the closing
// quote's index with off past it.
func (d *Decoder) skipBlocks(i int) (int, bool, error) {
	data := d.Data
	for i+window <= len(data) {
		in := (*[window]byte)(data[i:])
		m := syntaxMask((*[64]byte)(in[:64]))
		next := 0 // the first byte of the block not yet read
		for {
			var p int
			if m, next, p = skipEscapes(in, m, next); p < 0 {
				break
			}
			switch c := in[p]; {
			case c == '"':
				d.Off = i + p + 1
				return i + p, true, nil
			case c == '\\':
				n := escapeLen(data[i+p:])
				if n <= 0 {
					d.Off = i + p - n
					return 0, false, d.SyntaxError()
				}
				next = p + n
				m &^= lowBits(next)
			default:
				d.Off = i + p
				return 0, false, d.SyntaxError()
			}
		}
		i += max(next, 64)
	}
	return i, false, nil
}

// skipEscapes visits the stops of m from the lowest, passing over the
// one-byte escapes and the plain bytes it finds, until one is something
// else: p is then that stop, removed from the mask returned; at the end of
// the block p is -1.
func skipEscapes(in *[window]byte, m uint64, next int) (uint64, int, int) {
	for m != 0 {
		p := bits.TrailingZeros64(m) & 63
		m &= m - 1
		switch c := in[p]; {
		case c == '\\' && unescaped[in[p+1]] != 0:
			m &^= 2 << p // an escaped quote or backslash is no stop
			next = p + 2
		case c == '\\' || c == '"' || c < 0x20:
			return m, next, p
		}
	}
	return 0, next, -1
}

// lowBits is the mask of the bits below n.
func lowBits(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<n - 1
}

// decodeBlocks decodes a string from i into buf[w:] by blocks while a
// window fits in data, as decodeString does. It returns the buffer, its
// length and where decodeString goes on, or, done, the buffer holding the
// whole string, with off past its closing quote.
func (d *Decoder) decodeBlocks(buf []byte, w, i int) ([]byte, int, int, bool, error) {
	data := d.Data
	for i+window <= len(data) {
		if len(buf)-w < blockOut {
			buf = d.room(buf[:w], len(buf)+blockOut)
		}
		in := (*[window]byte)(data[i:])
		out := (*[blockOut]byte)(buf[w:])
		m := textMask((*[64]byte)(in[:64]))
		// next is the first byte of the block not yet decoded, o the
		// length of what it decoded to, end where the block ends, past 64
		// when a UTF-8 sequence straddles it.
		next, o, end := 0, 0, 64
		for {
			var p int
			if m, next, o, p = decodeEscapes(out, in, m, next, o); p < 0 {
				break
			}
			c := in[p]
			if c >= utf8.RuneSelf {
				if r, size := utf8.DecodeRune(data[i+p:]); r != utf8.RuneError || size != 1 {
					// UTF-8 is copied with the run it is in.
					m &^= (1<<size - 1) << p
					end = max(end, p+size)
					continue
				}
			}
			o += copy(out[o:], in[next:p])
			switch {
			case c == '"':
				d.Off = i + p + 1
				return buf, w + o, 0, true, nil
			case c == '\\':
				if n := escapeLen(data[i+p:]); n <= 0 {
					d.Off = i + p - n
					return nil, 0, 0, false, d.SyntaxError()
				}
				r := Hex4(data[i+p:])
				next = p + 6
				if utf16.IsSurrogate(r) {
					if dec := utf16.DecodeRune(r, Hex4(data[i+next:])); dec != utf8.RuneError {
						r = dec
						next += 6
					} else {
						r = utf8.RuneError
					}
				}
				o += utf8.EncodeRune(out[o:], r)
				m &^= lowBits(next)
			case c < 0x20:
				d.Off = i + p
				return nil, 0, 0, false, d.SyntaxError()
			default: // a stray byte
				o += utf8.EncodeRune(out[o:], utf8.RuneError)
				next = p + 1
			}
		}
		if n := end - next; n > 0 {
			// The run to the block's end, a whole block's worth copied
			// unless a UTF-8 sequence makes it longer.
			if n <= 64 && o <= 3*64-64 {
				src, dst := in[next:], out[o:]
				for k := 0; k < 64; k += 8 {
					binary.LittleEndian.PutUint64(dst[k:], binary.LittleEndian.Uint64(src[k:]))
				}
			} else {
				copy(out[o:], in[next:end])
			}
			o += n
			next = end
		}
		w += o
		i += next
	}
	return buf, w, i, false, nil
}

// decodeEscapes is skipEscapes for decoding: it copies the runs before the
// one-byte escapes it passes over from in[next:] to out[o:] and decodes
// the escapes. A run is copied 16 bytes at once, whatever its length,
// since most are shorter. It does not copy the run before the stop p it
// returns at.
func decodeEscapes(out *[blockOut]byte, in *[window]byte, m uint64, next, o int) (uint64, int, int, int) {
	le := binary.LittleEndian
	for m != 0 {
		p := bits.TrailingZeros64(m) & 63
		m &= m - 1
		c := in[p]
		e := unescaped[in[p+1]]
		switch {
		case c == '\\' && e != 0:
		case c == '\\' || c == '"' || c < 0x20 || c >= utf8.RuneSelf:
			return m, next, o, p
		default:
			continue // a plain byte the mask marked
		}
		// next < 64 here, o < 3*64: a block's output before a stop is at
		// most three bytes for each of its bytes.
		n, src, dst := p-next, in[next&63:], out[o:]
		le.PutUint64(dst[0:], le.Uint64(src[0:]))
		le.PutUint64(dst[8:], le.Uint64(src[8:]))
		if n > 16 {
			copy(dst[16:n], src[16:n])
		}
		o += n
		out[o&(blockOut-1)] = e
		o++
		m &^= 2 << p
		next = p + 2
	}
	return 0, next, o, -1
}

// room returns a buffer of at least n bytes at the end of text that starts
// with partial, a string being decoded into the buffer room gave before.
// A new buffer is sized for the rest of the document, which decodes to no
// more bytes than it has unless it has stray bytes or joined parts, so a
// document costs one, and the strings already decoded stay where they are.
func (d *Decoder) room(partial []byte, n int) []byte {
	if free := d.text[len(d.text):cap(d.text)]; len(free) >= n {
		return free
	}
	// Room for the rest of the document, where it will likely all be
	// read; when the reader may skip most of it, room for as much again
	// as so far.
	size := n + len(d.Data) - d.Off
	if d.Skims {
		size = n + max(cap(d.text), 4<<10)
	}
	d.text = makeNoZero(size)
	buf := d.text[:cap(d.text)]
	copy(buf, partial)
	return buf
}

// makeNoZero is make([]byte, 0, n) without clearing the bytes first: the
// buffer of a long document is as large as the document, and every byte of
// it that a string returns is written before it is read. strings.Builder's
// Grow is the one way to such memory outside the runtime.
func makeNoZero(n int) []byte {
	var b strings.Builder
	b.Grow(n)
	b.WriteByte(0)
	return unsafe.Slice(unsafe.StringData(b.String()), b.Cap())[:0]
}

// UseText lends the decoder text's capacity for the strings it decodes,
// which then alias text as far as it goes; past that the decoder
// allocates. A caller that recycles documents' buffers lends one with the
// document, so that decoding its strings costs no allocation; text must
// then not change while what the decoder returns is in use.
func (d *Decoder) UseText(text []byte) { d.text = text[:0] }

// Join concatenates strs, strings the decoder returned, into its buffer,
// copying only when there are several.
func (d *Decoder) Join(strs []string) string {
	switch len(strs) {
	case 0:
		return ""
	case 1:
		return strs[0]
	}
	n := 0
	for _, s := range strs {
		n += len(s)
	}
	buf := d.room(nil, n)[:0]
	for _, s := range strs {
		buf = append(buf, s...)
	}
	d.text = d.text[:len(d.text)+n]
	return unsafe.String(unsafe.SliceData(buf), n)
}
