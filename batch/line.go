package batch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// MaxCustomIDLength bounds a request's custom_id, in bytes.
const MaxCustomIDLength = 512

// Line is one request of an input file, as ParseLine reads it.
type Line struct {
	// CustomID is the caller's name for the request, unique in its file.
	CustomID string
	// Method is always "POST"; URL is the endpoint the request is for.
	Method, URL string
	// Body is the request body, a JSON object, as the file gives it.
	Body json.RawMessage
}

// LineError is why a line of an input file was refused, in the shape of
// a batch's errors.data entry: a code, the parameter, a message and the
// line number (1-based; 0 when the file as a whole is wrong).
type LineError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Line    int    `json:"line,omitempty"`
}

func (e *LineError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("batch: line %d: %s", e.Line, e.Message)
	}
	return "batch: " + e.Message
}

func lineErrorf(line int, code, param, format string, args ...any) *LineError {
	return &LineError{Code: code, Param: param, Line: line, Message: fmt.Sprintf(format, args...)}
}

// ParseLine reads one line of an input file (without its newline) for
// endpoint: a JSON object with custom_id, method "POST", url equal to
// endpoint and body a JSON object. n is the line's number, for the error.
func ParseLine(raw []byte, n int, endpoint string) (*Line, error) {
	var w struct {
		CustomID *string         `json:"custom_id"`
		Method   *string         `json:"method"`
		URL      *string         `json:"url"`
		Body     json.RawMessage `json:"body"`
	}
	if !utf8.Valid(raw) {
		return nil, lineErrorf(n, "invalid_json_line", "", "Line %d is not valid UTF-8.", n)
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, lineErrorf(n, "invalid_json_line", "", "Line %d is not a valid JSON object: %v.", n, err)
	}
	switch {
	case w.CustomID == nil || *w.CustomID == "":
		return nil, lineErrorf(n, "missing_required_parameter", "custom_id", "Line %d has no custom_id.", n)
	case len(*w.CustomID) > MaxCustomIDLength:
		return nil, lineErrorf(n, "invalid_value", "custom_id", "Line %d: custom_id is longer than %d bytes.", n, MaxCustomIDLength)
	case w.Method == nil:
		return nil, lineErrorf(n, "missing_required_parameter", "method", "Line %d has no method.", n)
	case *w.Method != "POST":
		return nil, lineErrorf(n, "invalid_method", "method", "Line %d: method must be 'POST', not '%s'.", n, *w.Method)
	case w.URL == nil:
		return nil, lineErrorf(n, "missing_required_parameter", "url", "Line %d has no url.", n)
	case *w.URL != endpoint:
		return nil, lineErrorf(n, "mismatched_endpoint", "url", "Line %d: url '%s' is not the batch's endpoint '%s'.", n, *w.URL, endpoint)
	}
	body := bytes.TrimSpace(w.Body)
	if len(body) == 0 || body[0] != '{' {
		return nil, lineErrorf(n, "invalid_value", "body", "Line %d: body must be a JSON object.", n)
	}
	return &Line{CustomID: *w.CustomID, Method: *w.Method, URL: *w.URL, Body: body}, nil
}

// splitLines calls fn for each non-blank line of content with its 1-based
// number, without the newline or a trailing carriage return. The first
// error fn returns stops it.
func splitLines(content []byte, fn func(n int, line []byte) error) error {
	n := 0
	for len(content) > 0 {
		n++
		var l []byte
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			l, content = content[:i], content[i+1:]
		} else {
			l, content = content, nil
		}
		l = bytes.TrimSuffix(l, []byte{'\r'})
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if err := fn(n, l); err != nil {
			return err
		}
	}
	return nil
}

// parseFile reads every line of an input file for endpoint. It reports
// up to maxErrors problems (malformed lines, duplicate custom_ids, too
// many requests) and, when there are none, the lines.
func parseFile(content []byte, endpoint string, maxRequests, maxErrors int) ([]*Line, []*LineError) {
	var (
		lines []*Line
		errs  []*LineError
	)
	seen := map[string]int{}
	splitLines(content, func(n int, raw []byte) error {
		l, err := ParseLine(raw, n, endpoint)
		if err != nil {
			errs = append(errs, err.(*LineError))
		} else if first, dup := seen[l.CustomID]; dup {
			errs = append(errs, lineErrorf(n, "duplicate_custom_id", "custom_id", "Line %d: custom_id '%s' is already used on line %d.", n, l.CustomID, first))
		} else {
			seen[l.CustomID] = n
			lines = append(lines, l)
		}
		if len(errs) >= maxErrors {
			return errStop
		}
		return nil
	})
	switch {
	case len(errs) > 0:
		return nil, errs
	case len(lines) == 0:
		return nil, []*LineError{lineErrorf(0, "empty_file", "input_file_id", "The input file holds no requests.")}
	case len(lines) > maxRequests:
		return nil, []*LineError{lineErrorf(0, "too_many_requests", "input_file_id", "The input file holds %d requests; a batch takes at most %d.", len(lines), maxRequests)}
	}
	return lines, nil
}

// errStop stops a walk early; it never leaves the package.
var errStop = fmt.Errorf("batch: stop")
