package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Finish reasons, as OpenAI and vLLM spell them.
const (
	finishStop      = "stop"
	finishLength    = "length"
	finishToolCalls = "tool_calls"
)

// minOutputTokens is the shortest answer when the output length is left
// to the prompt's hash (ignore_eos false).
const minOutputTokens = 4

// output is everything the engine will generate for a request, decided at
// arrival from the prompt so that it is deterministic.
type output struct {
	// text is what the model "generates" after the prompt: the answer
	// text, or for a tool call the call as the chat template renders it
	// ("\n<|tool_call|>name arguments"). Token k of the answer is
	// text[4k:4k+4] (the last one may be shorter).
	text string
	// tokens is the number of completion tokens.
	tokens int
	finish string
	// call is the tool call, when the answer is one; argsAt is the offset
	// of its arguments in text.
	call   *ToolCall
	argsAt int
	// A reasoning model's answer starts with its thinking: text[:contentAt]
	// is the thinking as generated (thinkOpen, thoughts, thinkClose), and
	// reasoning the thoughts in it, from reasoningAt, as vLLM's reasoning
	// parsers return them in reasoning_content; reasoningTokens is the
	// thinking's length in tokens. All zero for other models.
	contentAt       int
	reasoning       string
	reasoningAt     int
	reasoningTokens int
}

// thinks reports whether the answer is a reasoning model's.
func (o *output) thinks() bool { return o.reasoningTokens > 0 }

// thoughts is the part of the reasoning in text[lo:hi].
func (o *output) thoughts(lo, hi int) string {
	lo, hi = max(lo, o.reasoningAt), min(hi, o.reasoningAt+len(o.reasoning), len(o.text))
	if !o.thinks() || lo >= hi {
		return ""
	}
	return o.text[lo:hi]
}

// piece is the text of completion token k.
func (o *output) piece(k int) string {
	lo := min(k*TokenBytes, len(o.text))
	return o.text[lo:min(lo+TokenBytes, len(o.text))]
}

// words is the simulator's vocabulary for answers.
var words = strings.Fields(`the of and to in is that for it as with was on be at by this
had not are but from or have an they which one you were all we her she there would their
will when who him been has more if no out so said what up its about into than them can
only other new some could time these two may then do first any my now such like our over
man me even most made after also did many before must through back years where much your
way well down should because each just those people how too little state good very make
world still own see men work long get here between both life being under never day same
another know while last might us great old year off come since against go came right used
take three cache token prefix block engine model route batch stream agent turn tool value
result query index memory layer signal vector graph table`)

// rng is splitmix64: tiny, fast and good enough to pick words.
type rng uint64

func (r *rng) next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) word() string { return words[r.next()%uint64(len(words))] }

// planText decides a text answer: its length in tokens (max when
// ignoreEOS, else drawn from seed in [minOutputTokens, max]) and its words,
// exactly 4 bytes per token so every answer token is one tokenizer token.
// An answer that reaches max ends with finish reason "length", unless the
// cap is soft: the engine's default for a request that set none, where a
// real model would have gone on and the length drawn is where it stopped.
func planText(seed uint64, maxTokens int, ignoreEOS, soft bool) output {
	r := rng(seed)
	n := maxTokens
	if !ignoreEOS {
		lo := min(minOutputTokens, maxTokens)
		n = lo + int(r.next()%uint64(maxTokens-lo+1))
	}
	o := output{text: wordText(&r, n*TokenBytes), tokens: n, finish: finishStop}
	if n == maxTokens && (ignoreEOS || !soft) {
		o.finish = finishLength
	}
	return o
}

// wordText is words drawn from r, cut to exactly size bytes.
func wordText(r *rng, size int) string {
	var b strings.Builder
	b.Grow(size + 16)
	for b.Len() < size {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.word())
	}
	return b.String()[:size]
}

// planJSON decides a structured answer: JSON that satisfies the request's
// schema (any object for json_object), compact, properties in declared
// order, as engines with guided decoding write it. It ends when the JSON
// does, ignore_eos or not; JSON longer than maxTokens is cut there, with
// finish reason "length", as a real engine's is.
func planJSON(seed uint64, f *responseFormat, maxTokens int) output {
	r := rng(seed)
	g := schemaGen{r: &r, root: f.schema}
	if f.schema == nil {
		g.anyObject()
	} else {
		g.value(f.schema, 0)
	}
	text := string(g.b)
	o := output{text: text, tokens: CountTokens(text), finish: finishStop}
	if o.tokens > maxTokens {
		o.tokens = maxTokens
		o.text = text[:maxTokens*TokenBytes]
		o.finish = finishLength
	}
	return o
}

// A reasoning model thinks before it answers, between markers that vLLM's
// reasoning parsers (deepseek_r1, qwen3) split off as reasoning_content.
const (
	thinkOpen  = "<think>\n"
	thinkClose = "\n</think>\n\n"
	// minThoughtTokens and maxThoughtTokens bound the thoughts' length.
	minThoughtTokens = 8
	maxThoughtTokens = 32
	// thoughtSalt gives the thoughts a random stream of their own, apart
	// from the answer's.
	thoughtSalt = 0x7468696e6b696e67
)

// withThoughts puts a reasoning model's thinking before the answer that
// plan makes within the tokens left of maxTokens. The thinking is a whole
// number of tokens (its thoughts are cut to fit), so the answer's tokens
// are the same as on their own. Thinking that reaches maxTokens is cut
// there: no answer, finish reason "length".
func withThoughts(seed uint64, maxTokens int, plan func(maxTokens int) output) output {
	r := rng(seed ^ thoughtSalt)
	n := minThoughtTokens + int(r.next()%(maxThoughtTokens-minThoughtTokens+1))
	markers := len(thinkOpen) + len(thinkClose)
	thoughts := wordText(&r, n*TokenBytes+(TokenBytes-markers%TokenBytes)%TokenBytes)
	think := thinkOpen + thoughts + thinkClose
	thinkTokens := len(think) / TokenBytes
	var o output
	if maxTokens <= thinkTokens {
		o = output{text: think[:maxTokens*TokenBytes], tokens: maxTokens, finish: finishLength}
		thinkTokens = maxTokens
	} else {
		o = plan(maxTokens - thinkTokens)
		o.text = think + o.text
		o.tokens += thinkTokens
		if o.call != nil {
			o.argsAt += len(think)
		}
	}
	o.contentAt = len(think)
	o.reasoningAt = len(thinkOpen)
	o.reasoning = o.text[min(len(thinkOpen), len(o.text)):min(len(thinkOpen)+len(thoughts), len(o.text))]
	o.reasoningTokens = thinkTokens
	return o
}

// toolSpec is the part of a tool definition the simulator reads.
type toolSpec struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// chooseTool decides whether a chat request is answered with a tool call
// and which function it calls. It returns nil for a text answer.
func chooseTool(req *ChatCompletionRequest) (*toolSpec, error) {
	choice, err := parseToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	var tools []toolSpec
	if canonicalTools(req.Tools) != nil {
		if err := json.Unmarshal(req.Tools, &tools); err != nil {
			return nil, &paramError{param: "tools", msg: "tools must be an array of function tools"}
		}
	}
	if len(tools) == 0 {
		if choice.mode == "required" || choice.mode == "function" {
			return nil, &paramError{param: "tool_choice", msg: "tool_choice requires tools"}
		}
		return nil, nil
	}
	for i, t := range tools {
		if t.Function.Name == "" {
			return nil, &paramError{param: "tools", msg: fmt.Sprintf("tools[%d].function.name is required", i)}
		}
	}
	switch choice.mode {
	case "none":
		return nil, nil
	case "auto":
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return nil, nil
		}
		return &tools[0], nil
	case "required":
		return &tools[0], nil
	}
	for i := range tools {
		if tools[i].Function.Name == choice.name {
			return &tools[i], nil
		}
	}
	return nil, &paramError{param: "tool_choice", msg: fmt.Sprintf("tool_choice names function %q, which is not in tools", choice.name)}
}

// planToolCall decides a tool-call answer: a deterministic call id and
// arguments built from the parameter schema's property names, rendered as
// the chat template renders an assistant tool call. A call longer than
// maxTokens is cut, like a real model's, with finish reason "length".
func planToolCall(seed uint64, tool *toolSpec, maxTokens int) output {
	r := rng(seed)
	id := fmt.Sprintf("call_%016x%08x", r.next(), uint32(r.next()))
	args := toolArguments(&r, tool.Function.Parameters)
	head := "\n" + toolCallMarker + tool.Function.Name + " "
	text := head + args
	o := output{
		text:   text,
		tokens: CountTokens(text),
		finish: finishToolCalls,
		argsAt: len(head),
	}
	if o.tokens > maxTokens {
		o.tokens = maxTokens
		o.text = text[:min(len(text), maxTokens*TokenBytes)]
		o.finish = finishLength
	}
	o.call = &ToolCall{ID: id, Type: "function", Function: FunctionCall{
		Name:      tool.Function.Name,
		Arguments: o.text[min(o.argsAt, len(o.text)):],
	}}
	return o
}

// toolArguments are a call's arguments: compact JSON that satisfies the
// function's parameter schema (see schemaGen), properties in declared
// order. A schema that cannot be read, or names no properties, gets {}.
func toolArguments(r *rng, schema json.RawMessage) string {
	if len(bytes.TrimSpace(schema)) == 0 {
		return "{}"
	}
	root, err := decodeSchema(schema)
	if err != nil {
		return "{}"
	}
	g := schemaGen{r: r, root: root}
	g.arguments(root)
	return string(g.b)
}
