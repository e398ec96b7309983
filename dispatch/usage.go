package dispatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
)

// parseUsage reads the top-level "usage" object of an engine's answer or
// stream chunk, as encoding/json would into
//
//	struct{ Usage *Usage `json:"usage"` }
//
// and reports whether there was one. Every answer and every chunk of a
// stream passes through it, so the common shapes are read without
// allocating, by the request parser's scanner (jsonscan.Members), which
// checks the document whole as encoding/json does. Anything it does not
// read exactly as encoding/json would (a key that only matches
// case-insensitively, a repeated member, a number that is not a plain
// integer) is left to encoding/json.
func parseUsage(data []byte) (Usage, bool) {
	u, found, err := scanUsage(data)
	switch {
	case err == nil:
		return u, found
	case !errors.Is(err, errUnusual):
		return Usage{}, false // not valid JSON, or not an object: no usage
	}
	var v struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil || v.Usage == nil {
		return Usage{}, false
	}
	return *v.Usage, true
}

// errUnusual is scanUsage's answer where encoding/json must decide.
var errUnusual = errors.New("dispatch: usage of an unusual shape")

// scanUsage reads data's usage member, if it has one.
func scanUsage(data []byte) (u Usage, found bool, err error) {
	var raw []byte
	err = jsonscan.Members(data, func(key, value []byte) error {
		switch {
		case string(key) == "usage":
			if raw != nil {
				return errUnusual // repeated: encoding/json merges them
			}
			raw = value
		case bytes.EqualFold(key, []byte("usage")):
			return errUnusual
		}
		return nil
	})
	if err != nil || raw == nil || string(raw) == "null" {
		return u, false, err // a null pointer: no usage
	}
	err = jsonscan.Members(raw, func(key, value []byte) error {
		switch string(key) {
		case "prompt_tokens":
			return plainInt(value, &u.PromptTokens)
		case "completion_tokens":
			return plainInt(value, &u.CompletionTokens)
		case "total_tokens":
			return plainInt(value, &u.TotalTokens)
		case "prompt_tokens_details":
			return details(value, "cached_tokens", &u.PromptTokensDetails.CachedTokens)
		case "completion_tokens_details":
			return details(value, "reasoning_tokens", &u.CompletionTokensDetails.ReasoningTokens)
		}
		for _, k := range [...]string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details"} {
			if bytes.EqualFold(key, []byte(k)) {
				return errUnusual
			}
		}
		return nil
	})
	if err != nil {
		// Valid JSON already: a usage that is not an object, or one
		// the scan leaves to encoding/json.
		return Usage{}, false, errUnusual
	}
	return u, true, nil
}

// details reads an object of which only the member name counts into n, or
// a null, which leaves n.
func details(value []byte, name string, n *int) error {
	if string(value) == "null" {
		return nil
	}
	seen := false
	err := jsonscan.Members(value, func(key, v []byte) error {
		switch {
		case string(key) == name:
			if seen {
				return errUnusual
			}
			seen = true
			return plainInt(v, n)
		case bytes.EqualFold(key, []byte(name)):
			return errUnusual
		}
		return nil
	})
	if err != nil {
		return errUnusual
	}
	return nil
}

// plainInt reads a plain integer, or null (which leaves n), into n.
func plainInt(value []byte, n *int) error {
	if string(value) == "null" {
		return nil
	}
	if bytes.ContainsAny(value, ".eE") {
		return errUnusual
	}
	v, err := strconv.Atoi(string(value))
	if err != nil {
		return errUnusual
	}
	*n = v
	return nil
}
