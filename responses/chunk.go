package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
)

// readChunk reads an engine's chat.completion.chunk into c, as
// json.Unmarshal reads it into a zero chatChunk. Every streamed token
// passes through here, so the common shapes (text and reasoning deltas, a
// finish reason) are read by the request parser's scanner
// (jsonscan.Members, jsonscan.Elements, jsonscan.String), which checks the
// document whole as encoding/json does and keeps c's slice from chunk to
// chunk. Anything else (tool calls, an error, a key that matches only
// case-insensitively, a repeated member, a value of another type) is left
// to encoding/json. The strings of content and reasoning may alias data:
// they are valid until data is reused.
func readChunk(data []byte, c *chatChunk) error {
	choices := c.Choices[:0]
	*c = chatChunk{Choices: choices}
	if err := scanChunk(data, c); err == nil {
		return nil
	}
	*c = chatChunk{}
	return json.Unmarshal(data, c)
}

// errUnusualChunk is scanChunk's answer where encoding/json must decide.
var errUnusualChunk = errors.New("responses: chunk of an unusual shape")

// The members of a chunk, a choice and a delta that the scan reads.
var (
	chunkKeys  = []string{"choices", "error"}
	choiceKeys = []string{"delta", "finish_reason"}
	deltaKeys  = []string{"content", "reasoning_content", "reasoning", "tool_calls"}
)

func scanChunk(data []byte, c *chatChunk) error {
	return scanMembers(data, chunkKeys, func(i int, value []byte) error {
		switch {
		case string(value) == "null":
			return nil
		case i == 1:
			return errUnusualChunk // an error: encoding/json reads it
		}
		return jsonscan.Elements(value, func(elem []byte) error {
			c.Choices = append(c.Choices, chunkChoice{})
			return scanChoice(elem, &c.Choices[len(c.Choices)-1])
		})
	})
}

func scanChoice(data []byte, ch *chunkChoice) error {
	return scanMembers(data, choiceKeys, func(i int, value []byte) error {
		if i == 0 {
			if string(value) == "null" {
				return nil
			}
			return scanDelta(value, &ch.Delta)
		}
		s, err := nullableString(value)
		if s != nil {
			// Kept past the line: a copy.
			*s = strings.Clone(*s)
		}
		ch.FinishReason = s
		return err
	})
}

func scanDelta(data []byte, d *chunkDelta) error {
	return scanMembers(data, deltaKeys, func(i int, value []byte) error {
		var err error
		switch i {
		case 0:
			d.Content, err = nullableString(value)
		case 1:
			d.ReasoningContent, err = nullableString(value)
		case 2:
			d.Reasoning, err = nullableString(value)
		case 3:
			if string(value) != "null" {
				return errUnusualChunk // tool calls: encoding/json reads them
			}
		}
		return err
	})
}

// scanMembers reads data, one JSON object, with jsonscan.Members, and calls
// member with the index in keys of each member whose key is one of them;
// it skips the others. A key met twice, or one that matches a key only
// case-insensitively (encoding/json would read it as that key), is
// errUnusualChunk; data that is not an object is Members' error.
func scanMembers(data []byte, keys []string, member func(i int, value []byte) error) error {
	var seen uint64
	return jsonscan.Members(data, func(key, value []byte) error {
		for i, k := range keys {
			if string(key) != k {
				if bytes.EqualFold(key, []byte(k)) {
					return errUnusualChunk
				}
				continue
			}
			if seen&(1<<i) != 0 {
				return errUnusualChunk
			}
			seen |= 1 << i
			return member(i, value)
		}
		return nil
	})
}

// nullableString reads a JSON string or null, as encoding/json reads it
// into a *string.
func nullableString(value []byte) (*string, error) {
	if string(value) == "null" {
		return nil, nil
	}
	if value[0] != '"' {
		return nil, errUnusualChunk
	}
	s, err := jsonscan.String(value)
	if err != nil {
		return nil, err
	}
	return &s, nil
}
