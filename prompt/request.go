package prompt

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
)

// Request is what the turn path reads of a client's chat or text
// completion body: enough to admit, count, route and forward it. The body
// itself is forwarded as the client wrote it.
//
// A Request aliases the body it was parsed from: its strings and Tools
// share the body's bytes wherever the JSON needed no decoding. The body
// must stay unmodified for as long as the Request is used; the gateway
// forwards that same body and never writes to it.
type Request struct {
	// Model is the model asked for.
	Model string
	// Stream asks for a streamed answer.
	Stream bool
	// MaxTokens and MaxCompletionTokens are the output budgets the body
	// gives, nil when absent.
	MaxTokens, MaxCompletionTokens *int
	// HasStreamOptions: the body has a stream_options object (not null);
	// IncludeUsage is its include_usage.
	HasStreamOptions, IncludeUsage bool
	// PromptCacheKey, ServiceTier and SafetyIdentifier are the body's, ""
	// when absent.
	PromptCacheKey, ServiceTier, SafetyIdentifier string
	// Prompt is the request as the engine's chat template sees it: Model,
	// Tools and Messages for a chat, Text for a text completion (a prompt
	// given as several strings is their concatenation).
	Prompt Prompt
	// TokenIDs is a text completion's prompt given as token ids; nil
	// otherwise.
	TokenIDs []uint32
	// Prior is set by Memo.ParseChat when it remembers the body: how much
	// of it an earlier turn had, and where this turn's chain goes.
	Prior *Prior
}

// MaxOutputTokens is the request's output budget: max_completion_tokens,
// else max_tokens, else 0 (unbounded).
func (r *Request) MaxOutputTokens() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return 0
}

// FieldError is a request the parser refuses, in the terms of an OpenAI
// invalid_request_error: the offending parameter ("" for the body as a
// whole), a code and a message for the client.
type FieldError struct {
	Param, Code, Message string
}

func (e *FieldError) Error() string { return "prompt: " + e.Message }

func fieldError(param, code, format string, args ...any) *FieldError {
	return &FieldError{Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

// jsonError is err, from reading a body, with a syntax error told in the
// client's terms.
func jsonError(err error) error {
	if se, ok := err.(*jsonscan.SyntaxError); ok {
		return fieldError("", "invalid_json", "We could not parse the JSON body of your request: %s.", se.Reason())
	}
	return err
}

// ParseChat reads a /v1/chat/completions body in one pass. It refuses a
// body that is not a JSON object, lacks model or messages, or gives a
// field of the wrong type, with a *FieldError. The Request aliases body.
//
// It accepts and refuses what encoding/json does, with the same Param and
// Code, and reads the same values (the last of duplicate keys, U+FFFD for
// what is not UTF-8), with one difference: keys match exactly, as engines
// read them, where encoding/json would also take "Model" for "model".
func ParseChat(body []byte) (*Request, error) { return parse(body, nil, true) }

// ParseCompletion reads a /v1/completions body in one pass, like ParseChat.
func ParseCompletion(body []byte) (*Request, error) { return parse(body, nil, false) }

// parser walks a body once, filling r. Type errors do not stop it: the
// body must still be checked to its end, since a syntax error anywhere
// is the one reported; the first type error at each level is kept and
// reported, in order, by check.
type parser struct {
	jsonscan.Decoder
	chat bool
	r    *Request
	ints *[2]int // where MaxTokens and MaxCompletionTokens point

	// typeErr is the first top-level field of the wrong type.
	typeErr *FieldError

	// The last messages member, as far as it was read.
	hasMessages bool
	msgs        []Message
	calls       []ToolCall // the tool calls of msgs, each message's together
	msgErr      *FieldError
	contentErr  int // the first message whose content is of the wrong type, or -1

	// The last prompt member.
	hasPrompt, promptBad bool

	// memo, when not nil, is the Memo reading this body; track follows
	// the last messages member for it, and messagesSeen counts them.
	memo         *Memo
	track        *memoTrack
	messagesSeen int
}

// parse reads body, decoding its strings into text's capacity as far as
// it goes (jsonscan.Decoder.UseText).
func parse(body, text []byte, chat bool) (*Request, error) {
	p := parser{Decoder: jsonscan.Decoder{Data: body}, chat: chat, r: new(Request), contentErr: -1}
	p.UseText(text)
	if err := p.body(); err != nil {
		return nil, jsonError(err)
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return p.r, nil
}

func (p *parser) body() error {
	p.SkipSpace()
	switch p.Peek() {
	case '{':
		if err := p.object(); err != nil {
			return err
		}
	case 'n':
		// encoding/json reads null into a struct as nothing at all: the
		// request then lacks its model.
		if err := p.Literal("null"); err != nil {
			return err
		}
	default:
		p.mismatch(&p.typeErr, "", "an object")
		if err := p.Skip(); err != nil {
			return err
		}
	}
	return p.End()
}

// object reads the body's members. Of duplicates the last wins, and null
// stands for absent, as when encoding/json reads into pointers.
func (p *parser) object() error {
	r := p.r
	return p.Members(func(k []byte) error {
		switch string(k) {
		case "model":
			return p.optString(&r.Model, "model")
		case "stream":
			return p.optBool(&r.Stream, "stream")
		case "max_tokens":
			return p.optInt(&r.MaxTokens, 0, "max_tokens")
		case "max_completion_tokens":
			return p.optInt(&r.MaxCompletionTokens, 1, "max_completion_tokens")
		case "prompt_cache_key":
			return p.optString(&r.PromptCacheKey, "prompt_cache_key")
		case "service_tier":
			return p.optString(&r.ServiceTier, "service_tier")
		case "safety_identifier":
			return p.optString(&r.SafetyIdentifier, "safety_identifier")
		case "stream_options":
			return p.streamOptions()
		case "tools":
			return p.tools()
		case "messages":
			if p.chat {
				return p.messages()
			}
		case "prompt":
			if !p.chat {
				return p.prompt()
			}
		}
		return p.Skip()
	})
}

// check reports what is wrong with a body that is valid JSON, in the
// order encoding/json and the checks after it would find it.
func (p *parser) check() error {
	r := p.r
	if p.typeErr != nil {
		return p.typeErr
	}
	if r.Model == "" {
		return fieldError("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	r.Prompt.Model = r.Model
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", r.MaxTokens}, {"max_completion_tokens", r.MaxCompletionTokens}} {
		if f.v != nil && *f.v < 1 {
			return fieldError(f.name, "integer_below_min_value", "Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", f.name, *f.v)
		}
	}
	if !p.chat {
		switch {
		case !p.hasPrompt:
			return fieldError("prompt", "missing_required_parameter", "Missing required parameter: 'prompt'.")
		case p.promptBad:
			return fieldError("prompt", "invalid_type", "Invalid type for 'prompt': expected a string, an array of strings or an array of token ids.")
		}
		return nil
	}
	switch {
	case !p.hasMessages:
		return fieldError("messages", "missing_required_parameter", "Missing required parameter: 'messages'.")
	case p.msgErr != nil:
		return p.msgErr
	case len(p.msgs) == 0:
		return fieldError("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1.")
	case p.contentErr >= 0:
		i := p.contentErr
		return fieldError(fmt.Sprintf("messages[%d].content", i), "invalid_type", "Invalid type for 'messages[%d].content': expected a string or an array of content parts.", i)
	}
	r.Prompt.Messages = p.msgs
	return nil
}

// mismatch records, in *first unless it holds one already, that the value
// at off is not of the type want names; the caller skips the value.
func (p *parser) mismatch(first **FieldError, param, want string) {
	if *first == nil {
		*first = typeError(param, want, kindAt(p.Peek()))
	}
}

func typeError(param, want, got string) *FieldError {
	return fieldError(param, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", param, want, got)
}

// kindAt names the JSON type of a value that starts with c.
func kindAt(c byte) string {
	switch c {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// optString reads a top-level string, which encoding/json reads into a
// pointer: null clears it.
func (p *parser) optString(dst *string, param string) error {
	return p.stringField(dst, true, &p.typeErr, param)
}

// plainString reads a string within messages, which encoding/json reads
// into a plain string: null leaves it as it was.
func (p *parser) plainString(dst *string, param string) error {
	return p.stringField(dst, false, &p.msgErr, param)
}

// stringField reads a string into dst, recording a value of another type
// in *first.
func (p *parser) stringField(dst *string, nullClears bool, first **FieldError, param string) error {
	switch p.Peek() {
	case '"':
		s, err := p.Str()
		*dst = s
		return err
	case 'n':
		if nullClears {
			*dst = ""
		}
		return p.Literal("null")
	}
	p.mismatch(first, param, "a string")
	return p.Skip()
}

// optBool reads a boolean that null clears.
func (p *parser) optBool(dst *bool, param string) error {
	switch p.Peek() {
	case 't':
		*dst = true
		return p.Literal("true")
	case 'f':
		*dst = false
		return p.Literal("false")
	case 'n':
		*dst = false
		return p.Literal("null")
	}
	p.mismatch(&p.typeErr, param, "a boolean")
	return p.Skip()
}

// optInt reads an int that null clears into p.ints[slot]. encoding/json
// refuses a fraction, an exponent or an overflow, as a type error.
func (p *parser) optInt(dst **int, slot int, param string) error {
	switch c := p.Peek(); {
	case c == 'n':
		*dst = nil
		return p.Literal("null")
	case c != '-' && !isDigit(c):
		p.mismatch(&p.typeErr, param, "an integer")
		return p.Skip()
	}
	num, integer, err := p.Number()
	if err != nil {
		return err
	}
	n, perr := strconv.ParseInt(unsafe.String(unsafe.SliceData(num), len(num)), 10, strconv.IntSize)
	switch {
	case p.typeErr != nil:
	case !integer:
		p.typeErr = typeError(param, "an integer", "a decimal number ("+string(num)+")")
	case perr != nil:
		p.typeErr = typeError(param, "an integer", "a number out of range ("+string(num)+")")
	}
	if !integer || perr != nil {
		return nil
	}
	if p.ints == nil {
		p.ints = new([2]int)
	}
	p.ints[slot] = int(n)
	*dst = &p.ints[slot]
	return nil
}

// streamOptions reads stream_options. A second object updates the first
// rather than replacing it, as encoding/json does through a pointer it
// has already set.
func (p *parser) streamOptions() error {
	r := p.r
	switch p.Peek() {
	case 'n':
		r.HasStreamOptions, r.IncludeUsage = false, false
		return p.Literal("null")
	case '{':
	default:
		p.mismatch(&p.typeErr, "stream_options", "an object")
		return p.Skip()
	}
	r.HasStreamOptions = true
	return p.Members(func(k []byte) error {
		if string(k) == "include_usage" {
			return p.optBool(&r.IncludeUsage, "stream_options.include_usage")
		}
		return p.Skip()
	})
}

// tools keeps the tools value as it is in the body.
func (p *parser) tools() error {
	if p.Peek() == 'n' {
		p.r.Prompt.Tools = nil
		return p.Literal("null")
	}
	start := p.Off
	if err := p.Skip(); err != nil {
		return err
	}
	p.r.Prompt.Tools = p.Data[start:p.Off:p.Off]
	return nil
}

// messages reads the messages array, replacing what an earlier messages
// member said.
func (p *parser) messages() error {
	p.hasMessages, p.msgs, p.calls, p.msgErr, p.contentErr = false, p.msgs[:0], p.calls[:0], nil, -1
	switch p.Peek() {
	case 'n':
		return p.Literal("null")
	case '[':
	default:
		p.hasMessages = true
		p.messagesMismatch()
		return p.Skip()
	}
	p.hasMessages = true
	if p.memo != nil {
		p.messagesSeen++
		p.track = newMemoTrack(p.Off)
	}
	more, err := p.EnterArray()
	i := 0
	if more && err == nil && p.track != nil {
		// An earlier turn's messages come sized for the rest (memoResume).
		if i = p.memoResume(); i > 0 {
			more, err = p.NextElement()
		}
	}
	if cap(p.msgs) == 0 {
		p.msgs = make([]Message, 0, messagesGuess(len(p.Data)-p.Off))
	}
	if t := p.track; t != nil && t.ends == nil {
		t.ends, t.sums = make([]int, 0, cap(p.msgs)), make([]uint64, 0, cap(p.msgs))
	}
	for ; more && err == nil; i++ {
		p.msgs = append(p.msgs, Message{})
		switch p.Peek() {
		case '{':
			err = p.message(&p.msgs[i], i)
		case 'n':
			err = p.Literal("null")
		default:
			p.messagesMismatch()
			err = p.Skip()
		}
		if err != nil {
			break
		}
		if p.track != nil {
			p.memoStep()
		}
		more, err = p.NextElement()
	}
	return err
}

// messagesGuess is how many messages n bytes of a messages array are
// taken to hold: generous for agents' many short turns (the waste is
// bounded by a fifth of the bytes); append grows the slices when short.
func messagesGuess(n int) int { return 4 + n/256 }

func (p *parser) messagesMismatch() {
	if p.msgErr == nil {
		p.msgErr = fieldError("messages", "invalid_type", "Invalid type for 'messages': expected an array of message objects.")
	}
}

// message reads messages[i] into m. Within a message encoding/json reads
// into plain strings, where null changes nothing, and into a content value
// that the last duplicate replaces.
func (p *parser) message(m *Message, i int) error {
	base := len(p.calls) // this message's tool calls start here
	calls, contentBad := 0, false
	err := p.Members(func(k []byte) error {
		var err error
		switch string(k) {
		case "role":
			err = p.plainString(&m.Role, "messages.role")
		case "content":
			contentBad, err = p.content(&m.Content)
		case "tool_calls":
			calls, err = p.toolCalls(base)
		default:
			err = p.Skip()
		}
		return err
	})
	if contentBad && p.contentErr < 0 {
		p.contentErr = i
	}
	if calls > 0 {
		m.ToolCalls = p.calls[base : base+calls : base+calls]
	}
	return err
}

// content reads a message's content, a string or an array of parts whose
// texts it joins; bad reports a value of another type.
func (p *parser) content(dst *string) (bad bool, err error) {
	switch p.Peek() {
	case '"':
		*dst, err = p.Str()
		return false, err
	case 'n':
		*dst = ""
		return false, p.Literal("null")
	case '[':
	default:
		return true, p.Skip()
	}
	var texts [8]string
	parts := texts[:0]
	err = p.Elements(func(int) error {
		switch p.Peek() {
		case '{':
			text, ok, err := p.part()
			bad = bad || !ok
			if text != "" {
				parts = append(parts, text)
			}
			return err
		case 'n':
			return p.Literal("null")
		}
		bad = true
		return p.Skip()
	})
	*dst = p.Join(parts)
	return bad, err
}

// part reads a content part's text; ok is false when the text is not a
// string.
func (p *parser) part() (text string, ok bool, err error) {
	ok = true
	err = p.Members(func(k []byte) error {
		switch c := p.Peek(); {
		case string(k) != "text":
		case c == '"':
			var err error
			text, err = p.Str()
			return err
		case c == 'n':
			return p.Literal("null")
		default:
			ok = false
		}
		return p.Skip()
	})
	return text, ok, err
}

// toolCalls reads a message's tool_calls into p.calls[base:] and returns
// how many there are. A duplicate tool_calls member decodes into the calls
// an earlier one left, as encoding/json does when it reuses a slice: the
// calls up to the longest list read since it last emptied are kept and
// updated, not zeroed.
func (p *parser) toolCalls(base int) (int, error) {
	switch p.Peek() {
	case 'n':
		p.calls = p.calls[:base]
		return 0, p.Literal("null")
	case '[':
	default:
		p.mismatch(&p.msgErr, "messages.tool_calls", "an array")
		return 0, p.Skip()
	}
	n := 0
	err := p.Elements(func(j int) error {
		n = j + 1
		if base+j == len(p.calls) {
			if p.calls == nil {
				// As for messages, a guess from the rest of the body.
				p.calls = make([]ToolCall, 0, 4+(len(p.Data)-p.Off)/512)
			}
			p.calls = append(p.calls, ToolCall{})
		}
		switch p.Peek() {
		case '{':
			return p.toolCall(&p.calls[base+j])
		case 'n':
			return p.Literal("null")
		}
		p.mismatch(&p.msgErr, "messages.tool_calls", "an object")
		return p.Skip()
	})
	if n == 0 {
		p.calls = p.calls[:base]
	}
	return n, err
}

// toolCall reads a tool call into tc; a second function member updates
// the first.
func (p *parser) toolCall(tc *ToolCall) error {
	return p.Members(func(k []byte) error {
		switch c := p.Peek(); {
		case string(k) != "function":
		case c == '{':
			return p.Members(func(k []byte) error {
				switch string(k) {
				case "name":
					return p.plainString(&tc.Name, "messages.tool_calls.function.name")
				case "arguments":
					return p.plainString(&tc.Arguments, "messages.tool_calls.function.arguments")
				}
				return p.Skip()
			})
		case c == 'n':
			return p.Literal("null")
		default:
			p.mismatch(&p.msgErr, "messages.tool_calls.function", "an object")
		}
		return p.Skip()
	})
}

// prompt reads a text completion's prompt: a string, strings (null ones
// empty), token ids, or arrays of token ids (null ids 0), tried in that
// order as encoding/json would be; a prompt that is none of them is bad.
func (p *parser) prompt() error {
	r := p.r
	p.hasPrompt, p.promptBad, r.Prompt.Text, r.TokenIDs = false, false, "", nil
	switch p.Peek() {
	case 'n':
		return p.Literal("null")
	case '"':
		p.hasPrompt = true
		var err error
		r.Prompt.Text, err = p.Str()
		return err
	case '[':
	default:
		p.hasPrompt, p.promptBad = true, true
		return p.Skip()
	}
	p.hasPrompt = true
	var texts [8]string
	strs, ids, batches := texts[:0], []uint32(nil), []uint32(nil)
	isStrs, isIDs, isBatches := true, true, true
	err := p.Elements(func(int) error {
		switch c := p.Peek(); {
		case c == '"':
			isIDs, isBatches = false, false
			s, err := p.Str()
			if isStrs && s != "" {
				strs = append(strs, s)
			}
			return err
		case c == 'n':
			if isIDs {
				ids = append(ids, 0)
			}
			return p.Literal("null")
		case c == '[':
			isStrs, isIDs = false, false
			var err error
			batches, isBatches, err = p.tokenIDs(batches, isBatches)
			return err
		case c == '-' || isDigit(c):
			isStrs, isBatches = false, false
			id, ok, err := p.tokenID()
			if !ok {
				isIDs = false
			} else if isIDs {
				ids = append(ids, id)
			}
			return err
		}
		isStrs, isIDs, isBatches = false, false, false
		return p.Skip()
	})
	switch {
	case isStrs:
		r.Prompt.Text = p.Join(strs)
	case isIDs:
		r.TokenIDs = ids
	case isBatches:
		r.TokenIDs = batches
		if r.TokenIDs == nil {
			r.TokenIDs = []uint32{}
		}
	default:
		p.promptBad = true
	}
	return err
}

// tokenIDs reads an array of token ids, appending them to ids while ok.
func (p *parser) tokenIDs(ids []uint32, ok bool) ([]uint32, bool, error) {
	err := p.Elements(func(int) error {
		switch c := p.Peek(); {
		case c == 'n':
			if ok {
				ids = append(ids, 0)
			}
			return p.Literal("null")
		case c == '-' || isDigit(c):
			id, idOK, err := p.tokenID()
			if !idOK {
				ok = false
			} else if ok {
				ids = append(ids, id)
			}
			return err
		}
		ok = false
		return p.Skip()
	})
	return ids, ok, err
}

// tokenID reads a number and reports whether it is a uint32.
func (p *parser) tokenID() (uint32, bool, error) {
	num, integer, err := p.Number()
	if err != nil || !integer || num[0] == '-' {
		return 0, false, err
	}
	n, perr := strconv.ParseUint(unsafe.String(unsafe.SliceData(num), len(num)), 10, 32)
	return uint32(n), perr == nil, nil
}

// isDigit reports whether c is an ASCII digit: it, or '-', starts a number.
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
