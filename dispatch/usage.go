package dispatch

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// parseUsage reads the top-level "usage" object of an engine's answer or
// stream chunk, as encoding/json would into
//
//	struct{ Usage *Usage `json:"usage"` }
//
// and reports whether there was one. Every answer and every chunk of a
// stream passes through it, so the common shapes are read without
// allocating: the document is validated whole, then walked once for the
// usage member. Anything the walk does not read exactly as encoding/json
// would (a key that only matches case-insensitively, a repeated member, a
// number that is not a plain integer) is left to encoding/json.
func parseUsage(data []byte) (Usage, bool) {
	if !json.Valid(data) {
		return Usage{}, false
	}
	if u, found, ok := scanUsage(data); ok {
		return u, found
	}
	var v struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil || v.Usage == nil {
		return Usage{}, false
	}
	return *v.Usage, true
}

// scanUsage walks valid JSON data for its usage member; ok is false where
// the walk cannot answer as encoding/json would.
func scanUsage(data []byte) (u Usage, found, ok bool) {
	w := walker{b: data}
	w.ws()
	if !w.eat('{') {
		return u, false, true // not an object: no usage
	}
	err := w.members(func(key []byte) bool {
		if !bytes.Equal(key, []byte("usage")) {
			if bytes.EqualFold(key, []byte("usage")) {
				return false
			}
			w.skip()
			return true
		}
		if found {
			return false // repeated: encoding/json merges them
		}
		found = true
		if w.null() {
			found = false // a null pointer: no usage
			return true
		}
		return w.usage(&u)
	})
	return u, found, err
}

// walker reads valid JSON; it never sees malformed input.
type walker struct {
	b []byte
	i int
}

func (w *walker) ws() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

func (w *walker) eat(c byte) bool {
	w.ws()
	if w.i < len(w.b) && w.b[w.i] == c {
		w.i++
		return true
	}
	return false
}

func (w *walker) null() bool {
	w.ws()
	if bytes.HasPrefix(w.b[w.i:], []byte("null")) {
		w.i += 4
		return true
	}
	return false
}

// members calls member for each key of the object whose '{' was read, with
// the reader at the key's value; member reads the value or returns false.
// A key with an escape is not compared: members returns false.
func (w *walker) members(member func(key []byte) bool) bool {
	if w.eat('}') {
		return true
	}
	for {
		w.ws()
		key, plain := w.str()
		if !plain {
			return false
		}
		w.eat(':')
		w.ws()
		if !member(key) {
			return false
		}
		if w.eat(',') {
			continue
		}
		w.eat('}')
		return true
	}
}

// str reads a string at the reader and returns its raw contents, and
// whether they hold no escape.
func (w *walker) str() ([]byte, bool) {
	w.i++ // '"'
	start, plain := w.i, true
	for w.b[w.i] != '"' {
		if w.b[w.i] == '\\' {
			plain = false
			w.i++
		}
		w.i++
	}
	w.i++
	return w.b[start : w.i-1], plain
}

// skip reads one value.
func (w *walker) skip() {
	w.ws()
	switch w.b[w.i] {
	case '"':
		w.str()
	case '{', '[':
		depth := 0
		for {
			switch w.b[w.i] {
			case '"':
				w.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			w.i++
			if depth == 0 {
				return
			}
		}
	default: // number, true, false, null
		for w.i < len(w.b) {
			switch w.b[w.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return
			}
			w.i++
		}
	}
}

// usage reads a usage object into u.
func (w *walker) usage(u *Usage) bool {
	if !w.eat('{') {
		return false // encoding/json rejects it
	}
	return w.members(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return w.int(&u.PromptTokens)
		case "completion_tokens":
			return w.int(&u.CompletionTokens)
		case "total_tokens":
			return w.int(&u.TotalTokens)
		case "prompt_tokens_details":
			return w.details("cached_tokens", &u.PromptTokensDetails.CachedTokens)
		case "completion_tokens_details":
			return w.details("reasoning_tokens", &u.CompletionTokensDetails.ReasoningTokens)
		}
		for _, k := range [...]string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details"} {
			if bytes.EqualFold(key, []byte(k)) {
				return false
			}
		}
		w.skip()
		return true
	})
}

// details reads an object of which only the member name counts, into n.
func (w *walker) details(name string, n *int) bool {
	if w.null() {
		return true
	}
	if !w.eat('{') {
		return false
	}
	seen := false
	return w.members(func(key []byte) bool {
		if string(key) == name {
			if seen {
				return false
			}
			seen = true
			return w.int(n)
		}
		if bytes.EqualFold(key, []byte(name)) {
			return false
		}
		w.skip()
		return true
	})
}

// int reads a plain integer, or null (which leaves n), into n.
func (w *walker) int(n *int) bool {
	if w.null() {
		return true
	}
	start := w.i
	for w.i < len(w.b) && (w.b[w.i] == '-' || '0' <= w.b[w.i] && w.b[w.i] <= '9') {
		w.i++
	}
	if w.i < len(w.b) {
		switch w.b[w.i] {
		case '.', 'e', 'E':
			return false
		}
	}
	v, err := strconv.Atoi(string(w.b[start:w.i]))
	if err != nil {
		return false
	}
	*n = v
	return true
}
