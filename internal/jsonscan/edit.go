package jsonscan

import (
	"errors"
	"slices"
)

// Member is a top-level member of a JSON object: its key and its value as
// raw JSON.
type Member struct {
	Key   string
	Value []byte
	// Replace, for Edit, sets the member only in place of one of its key
	// that the object has; it adds none.
	Replace bool
}

// errNotObject is what Edit and Lookup answer for a document that is not
// a JSON object.
var errNotObject = errors.New("jsonscan: not a JSON object")

// span is a member's bytes in its object: from its key's quote to the end
// of its value, and, when the member is kept, the value's start.
type span struct {
	from, value, to int
	key             string
}

// spans reads the top-level members of the object obj, checking it.
func spans(obj []byte) ([]span, int, error) {
	d := Decoder{Data: obj}
	d.SkipSpace()
	if d.Peek() != '{' {
		return nil, 0, errNotObject
	}
	var out []span
	var closing int
	more, err := d.EnterObject()
	for more && err == nil {
		s := span{from: d.Off}
		var k []byte
		if k, err = d.Key(); err != nil {
			break
		}
		s.key, s.value = string(k), d.Off
		if err = d.Skip(); err != nil {
			break
		}
		s.to = d.Off
		out = append(out, s)
		d.SkipSpace()
		closing = d.Off
		more, err = d.NextMember()
	}
	if err != nil {
		return nil, 0, err
	}
	if len(out) == 0 {
		closing = d.Off - 1
	}
	if err := d.End(); err != nil {
		return nil, 0, err
	}
	return out, closing, nil
}

// Edit is the JSON object obj with set's members in place of the members
// of their keys (a key obj repeats is kept once, where it first came), or
// added at its end where it has none, and the members named by drop
// removed; a member marked Replace is only ever put in place of one.
// Every other member comes as it came, undecoded: the one way a
// request body is edited on its way to an engine without reading what it
// leaves alone (an agent's history). set's keys are plain names, written
// as they are.
func Edit(obj []byte, set []Member, drop ...string) ([]byte, error) {
	ms, closing, err := spans(obj)
	if err != nil {
		return nil, err
	}
	n := len(obj)
	for _, m := range set {
		n += len(m.Key) + len(m.Value) + 4
	}
	out := make([]byte, 0, n)
	if len(ms) > 0 {
		out = append(out, obj[:ms[0].from]...)
	} else {
		out = append(out, obj[:closing]...)
	}
	placed := make([]bool, len(set))
	first := true
	// put writes a member: raw as it came (key ""), or key and value.
	put := func(key string, raw []byte) {
		if !first {
			out = append(out, ',')
		}
		if key != "" {
			out = append(out, '"')
			out = append(out, key...)
			out = append(out, '"', ':')
		}
		out = append(out, raw...)
		first = false
	}
	for _, s := range ms {
		switch i := indexOf(set, s.key); {
		case slices.Contains(drop, s.key):
		case i < 0:
			put("", obj[s.from:s.to])
		case !placed[i]:
			put(s.key, set[i].Value)
			placed[i] = true
		}
	}
	for i, m := range set {
		if !placed[i] && !m.Replace && !slices.Contains(drop, m.Key) {
			put(m.Key, m.Value)
		}
	}
	return append(out, obj[closing:]...), nil
}

// IsObject reports whether obj is one JSON object, well formed.
func IsObject(obj []byte) bool {
	_, _, err := spans(obj)
	return err == nil
}

// Lookup is the raw value of obj's member key (the last, where obj repeats
// it, as engines read it) and whether obj has one.
func Lookup(obj []byte, key string) ([]byte, bool, error) {
	ms, _, err := spans(obj)
	if err != nil {
		return nil, false, err
	}
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].key == key {
			return obj[ms[i].value:ms[i].to], true, nil
		}
	}
	return nil, false, nil
}

func indexOf(set []Member, k string) int {
	for i, m := range set {
		if m.Key == k {
			return i
		}
	}
	return -1
}
