package prompt

import (
	"unicode/utf16"
	"unicode/utf8"

	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
)

// BodyKind names the API whose body TextBound reads.
type BodyKind uint8

// The bodies TextBound reads.
const (
	// ChatBody is a /v1/chat/completions body: the text is the content of
	// its system, developer, user and tool messages (a string, or the
	// parts of type text).
	ChatBody BodyKind = iota + 1
	// CompletionBody is a /v1/completions body: the text is its prompt
	// string, or the longest of its prompt strings, which an engine reads
	// as prompts of their own.
	CompletionBody
	// ResponsesBody is a /v1/responses body: the text is its instructions
	// and the content of its input's user, system and developer messages
	// (the input string, a message's string, or its parts of type
	// input_text), which the context keeps whatever it drops or compacts.
	// A body whose truncation is other than "disabled" (the default) proves
	// nothing: its context may be cut to fit.
	ResponsesBody
)

// Bound is what a body's bytes prove about its prompt.
type Bound struct {
	// Model is the body's model. It aliases the body.
	Model string
	// Text is a lower bound on the bytes of UTF-8 text the prompt holds:
	// the decoded length of strings the engine's prompt is sure to hold
	// (BodyKind says which), less where a string's decoding could only
	// lengthen it (a byte that is not UTF-8 becomes U+FFFD).
	Text int
}

// TextBound reads body, a request of kind, in one pass that decodes and
// allocates nothing, and returns its model and a lower bound on the text
// of its prompt; ok is false when the bytes prove nothing: the body is
// not valid JSON, its model is missing or not plain UTF-8, or a key or
// value that decides what is counted is escaped (the pass unescapes
// nothing). Members that are escaped or not of the expected type count
// for nothing, and of duplicate keys the last is read, as the decoders
// read them: the bound never exceeds what a decoder that accepts the
// body finds.
//
// It is meant for a body too large for its model's context to be worth
// decoding: at the speed of a scan, it proves that the text alone has
// more bytes than the context has tokens times the longest token.
func TextBound(body []byte, kind BodyKind) (b Bound, ok bool) {
	d := bounder{Decoder: jsonscan.Decoder{Data: body}, kind: kind}
	d.SkipSpace()
	if d.Peek() != '{' {
		return Bound{}, false
	}
	var model []byte
	// main is the text of messages, prompt or input, instructions that of
	// instructions; each is its member's last.
	main, instructions := 0, 0
	truncated, spoiled := false, false
	err := d.plainMembers(func(k []byte, plain bool) error {
		if !plain {
			// An escaped key may name what is counted, or truncation.
			spoiled = true
			return d.Skip()
		}
		var err error
		switch string(k) {
		case "model":
			var isString bool
			if model, isString, err = d.plainString(); err == nil && !isString {
				model = nil
			}
		case "messages", "prompt", "input", "instructions", "truncation":
			if textMembers[string(k)] != kind {
				return d.Skip()
			}
			switch string(k) {
			case "messages":
				main, err = d.messages()
			case "prompt":
				main, err = d.completionPrompt()
			case "input":
				main, err = d.input()
			case "instructions":
				instructions, err = d.text()
			case "truncation":
				truncated, err = d.truncation()
			}
		default:
			err = d.Skip()
		}
		return err
	})
	// A model that is not UTF-8 would be read with U+FFFD in it.
	if err != nil || d.End() != nil || spoiled || truncated || len(model) == 0 || !utf8.Valid(model) {
		return Bound{}, false
	}
	return Bound{Model: bytesString(model), Text: main + instructions}, true
}

// textMembers are the top-level members TextBound reads, with the kind of
// body it reads each of.
var textMembers = map[string]BodyKind{
	"messages": ChatBody, "prompt": CompletionBody,
	"input": ResponsesBody, "instructions": ResponsesBody, "truncation": ResponsesBody,
}

// bounder is the decoder TextBound reads with.
type bounder struct {
	jsonscan.Decoder
	kind BodyKind
}

// plainMembers is members for a pass that unescapes nothing: member gets
// a key's raw bytes, and plain false when it has escapes.
func (d *bounder) plainMembers(member func(key []byte, plain bool) error) error {
	more, err := d.EnterObject()
	for more && err == nil {
		var k []byte
		var plain bool
		if k, plain, err = d.plainKey(); err == nil {
			err = member(k, plain)
		}
		if err == nil {
			more, err = d.NextMember()
		}
	}
	return err
}

// plainKey reads a member's key and the colon after it, leaving off at
// the value, and returns the key's raw bytes and whether it has no escape.
func (d *bounder) plainKey() ([]byte, bool, error) {
	if j := d.ShortString(false); j >= 0 && j+1 < len(d.Data) && d.Data[j+1] == ':' {
		k := d.Data[d.Off+1 : j]
		d.Off = j + 2
		d.SkipSpace()
		return k, true, nil
	}
	if d.Peek() != '"' {
		return nil, false, d.SyntaxError()
	}
	start, end, escaped, err := d.SkipString()
	if err != nil {
		return nil, false, err
	}
	d.SkipSpace()
	if d.Peek() != ':' {
		return nil, false, d.SyntaxError()
	}
	d.Off++
	d.SkipSpace()
	return d.Data[start:end], !escaped, nil
}

// plainString reads the value at off; for a string without escapes it
// returns its bytes and true, for anything else nil and false.
func (d *bounder) plainString() ([]byte, bool, error) {
	if d.Peek() != '"' {
		return nil, false, d.Skip()
	}
	start, end, escaped, err := d.SkipString()
	if err != nil || escaped {
		return nil, false, err
	}
	return d.Data[start:end], true, nil
}

// text reads the value at off and returns its decoded length when it is
// a string, else 0.
func (d *bounder) text() (int, error) {
	if d.Peek() != '"' {
		return 0, d.Skip()
	}
	if j := d.ShortString(false); j >= 0 {
		n := j - d.Off - 1
		d.Off = j + 1
		return n, nil
	}
	start, end, escaped, err := d.SkipString()
	if err != nil || !escaped {
		return end - start, err
	}
	return unescapedLen(d.Data[start:end]), nil
}

// unescapedLen is the length of s, the contents of a JSON string that
// skipString checked, with its escapes decoded to UTF-8. A surrogate half
// counts two bytes: a pair its four, a lone one (U+FFFD, three) less.
func unescapedLen(s []byte) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if s[i+1] != 'u' {
			n-- // two bytes for one
			i++
			continue
		}
		switch r := jsonscan.Hex4(s[i:]); {
		case r < 0x80:
			n -= 5
		case r < 0x800, utf16.IsSurrogate(r):
			n -= 4
		default:
			n -= 3
		}
		i += 5
	}
	return n
}

// messages reads a chat's messages and returns the text of those whose
// role the chat template is sure to render.
func (d *bounder) messages() (int, error) {
	return d.items(func() (int, error) { return d.message(chatRoles, "text") })
}

// input reads a Responses input: a string, the user's message, or items.
func (d *bounder) input() (int, error) {
	if d.Peek() == '"' {
		return d.text()
	}
	return d.items(func() (int, error) { return d.message(inputRoles, "input_text") })
}

// items reads the array at off, adding up what item makes of each
// object in it; anything else counts for nothing.
func (d *bounder) items(item func() (int, error)) (int, error) {
	if d.Peek() != '[' {
		return 0, d.Skip()
	}
	n := 0
	err := d.Elements(func(int) error {
		if d.Peek() != '{' {
			return d.Skip()
		}
		m, err := item()
		n += m
		return err
	})
	return n, err
}

// Roles whose messages are always rendered: by every chat template (a
// chat), by the Responses context, which drops or compacts the rest.
var (
	chatRoles  = []string{"system", "developer", "user", "tool"}
	inputRoles = []string{"system", "developer", "user"}
)

// message reads a message object and returns its content's text when its
// role is one of roles (and, for Responses, its type is message or
// absent); partType is the type of the content parts that are text.
func (d *bounder) message(roles []string, partType string) (int, error) {
	var role, typ []byte
	content, known := 0, true
	err := d.plainMembers(func(k []byte, plain bool) error {
		if !plain {
			known = false
			return d.Skip()
		}
		var err error
		var isString bool
		switch string(k) {
		case "role":
			if role, isString, err = d.plainString(); err == nil && !isString {
				role = nil
			}
		case "type":
			if d.kind != ResponsesBody {
				return d.Skip()
			}
			if typ, isString, err = d.plainString(); err == nil && !isString {
				typ, known = nil, false
			}
		case "content":
			content, err = d.content(partType)
		default:
			err = d.Skip()
		}
		return err
	})
	if err != nil || !known || (typ != nil && string(typ) != "message") || !containsString(roles, role) {
		return 0, err
	}
	return content, nil
}

// content reads a message's content: a string, or parts of which those
// of partType hold text.
func (d *bounder) content(partType string) (int, error) {
	if d.Peek() == '"' {
		return d.text()
	}
	return d.items(func() (int, error) { return d.part(partType) })
}

// part reads a content part and returns its text's length when its type
// is partType.
func (d *bounder) part(partType string) (int, error) {
	var typ []byte
	text, known := 0, true
	err := d.plainMembers(func(k []byte, plain bool) error {
		if !plain {
			known = false
			return d.Skip()
		}
		var err error
		switch string(k) {
		case "type":
			typ, _, err = d.plainString()
		case "text":
			text, err = d.text()
		default:
			err = d.Skip()
		}
		return err
	})
	if err != nil || !known || string(typ) != partType {
		return 0, err
	}
	return text, nil
}

// completionPrompt reads a completion's prompt: a string, or strings
// (each a prompt of its own, so the longest counts) or token ids, which
// count for nothing.
func (d *bounder) completionPrompt() (int, error) {
	if d.Peek() != '[' {
		return d.text()
	}
	longest := 0
	err := d.Elements(func(int) error {
		n, err := d.text()
		longest = max(longest, n)
		return err
	})
	return longest, err
}

// truncation reads Responses' truncation and reports whether it lets the
// context be cut: anything but "disabled" or null does, or may.
func (d *bounder) truncation() (bool, error) {
	if d.Peek() == 'n' {
		return false, d.Literal("null")
	}
	v, _, err := d.plainString()
	return string(v) != "disabled", err
}

func containsString(set []string, b []byte) bool {
	for _, s := range set {
		if string(b) == s {
			return true
		}
	}
	return false
}
