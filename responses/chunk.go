package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// readChunk reads an engine's chat.completion.chunk into c, as
// json.Unmarshal reads it into a zero chatChunk. Every streamed token
// passes through here, so the common shapes (text and reasoning deltas, a
// finish reason) are read by the request parser's decoder
// (prompt.Members, prompt.Elements, prompt.String), which checks the
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

func scanChunk(data []byte, c *chatChunk) error {
	var seenChoices bool
	return prompt.Members(data, func(key, value []byte) error {
		switch {
		case string(key) == "choices":
			if seenChoices {
				return errUnusualChunk
			}
			seenChoices = true
			if string(value) == "null" {
				return nil
			}
			return prompt.Elements(value, func(elem []byte) error {
				c.Choices = append(c.Choices, chunkChoice{})
				return scanChoice(elem, &c.Choices[len(c.Choices)-1])
			})
		case string(key) == "error":
			if string(value) != "null" {
				return errUnusualChunk
			}
		case bytes.EqualFold(key, []byte("choices")), bytes.EqualFold(key, []byte("error")):
			return errUnusualChunk
		}
		return nil
	})
}

func scanChoice(data []byte, ch *chunkChoice) error {
	if len(data) == 0 || data[0] != '{' {
		return errUnusualChunk
	}
	var seen [2]bool
	return prompt.Members(data, func(key, value []byte) error {
		switch {
		case string(key) == "delta":
			if seen[0] {
				return errUnusualChunk
			}
			seen[0] = true
			if string(value) == "null" {
				return nil
			}
			if value[0] != '{' {
				return errUnusualChunk
			}
			return scanDelta(value, &ch.Delta)
		case string(key) == "finish_reason":
			if seen[1] {
				return errUnusualChunk
			}
			seen[1] = true
			s, err := nullableString(value)
			if s != nil {
				// Kept past the line: a copy.
				*s = strings.Clone(*s)
			}
			ch.FinishReason = s
			return err
		case bytes.EqualFold(key, []byte("delta")), bytes.EqualFold(key, []byte("finish_reason")):
			return errUnusualChunk
		}
		return nil
	})
}

// deltaKeys are the members of a delta scanDelta reads.
var deltaKeys = [...]string{"content", "reasoning_content", "reasoning", "tool_calls"}

func scanDelta(data []byte, d *chunkDelta) error {
	var seen [len(deltaKeys)]bool
	return prompt.Members(data, func(key, value []byte) error {
		for i, k := range deltaKeys {
			if string(key) != k {
				if bytes.EqualFold(key, []byte(k)) {
					return errUnusualChunk
				}
				continue
			}
			if seen[i] {
				return errUnusualChunk
			}
			seen[i] = true
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
	s, err := prompt.String(value)
	if err != nil {
		return nil, err
	}
	return &s, nil
}
