package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
)

// CreateRequest is a decoded, validated POST /v1/responses body.
type CreateRequest struct {
	Model string
	// Input is the request's own items; item references are resolved
	// when the response is created.
	Input              []Item
	Instructions       *string
	PreviousResponseID string
	Conversation       string
	// Store defaults to true.
	Store      bool
	Stream     bool
	Background bool
	// Tools are the functions the engine is offered, namespace tools'
	// functions flattened into the list; HostedTools the tools of types
	// turnpike cannot run (Config.HostedTools drops or refuses them);
	// ToolsRaw every tool as the client sent it, echoed on the response.
	Tools       []Tool
	HostedTools []HostedTool
	ToolsRaw    []json.RawMessage
	// MCP are the request's mcp tools, which the gateway runs (mcp.go).
	MCP []MCPServer
	// ToolChoice is the tool_choice as sent, echoed; toolChoice is what
	// the engine is told.
	ToolChoice        json.RawMessage
	EngineChoice      EngineChoice
	ParallelToolCalls *bool
	MaxOutputTokens   *int
	// MaxToolCalls bounds calls to hosted tools, which turnpike never
	// makes; echoed.
	MaxToolCalls *int
	Temperature  *float64
	TopP         *float64
	// TopLogprobs is echoed; turnpike returns no logprobs.
	TopLogprobs *int
	Metadata    map[string]string
	// Truncation is "auto" or "disabled" (the default).
	Truncation string
	Text       TextConfig
	// ServiceTier is as sent, but "fast", which OpenAI serves as
	// "priority", reads "priority".
	ServiceTier      string
	PromptCacheKey   *string
	SafetyIdentifier *string
	User             *string
	Include          []string
	Reasoning        *Reasoning
	// PromptCacheRetention and Prompt (a stored prompt template's
	// reference, which turnpike cannot expand) are echoed.
	PromptCacheRetention *string
	Prompt               json.RawMessage
	// CompactThreshold, when above 0, compacts the context first when its
	// prompt passes this many tokens (context_management); the response's
	// output then starts with the compaction item.
	CompactThreshold int
	// Prior is the context of a previous response that the caller kept
	// itself (a WebSocket connection keeps its last response), used when
	// PreviousResponseID names it and the store does not hold it, as
	// with store:false. It is never decoded from a body.
	Prior *PriorContext

	// raw is the body as received, kept with a background job so that it
	// can be re-run after a restart.
	Body []byte
}

// PriorContext is a response's whole context kept by the caller: the
// items of every turn of its chain, inputs and outputs, in order.
type PriorContext struct {
	// ID is the response's id.
	ID string
	// Session names the chain's session for routing (its first
	// response's id); empty leaves the turn to start one.
	Session string
	Items   []Item
}

// Limits on what a request may carry.
const (
	MaxMetadataKeys     = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
	maxTopLogprobs      = 20
)

// DecodeCreateRequest decodes a POST /v1/responses body strictly: an
// unknown parameter, a wrong type or a value out of range is an
// *apierror.Error of class ErrInvalid that names the parameter. Nothing is silently dropped.
// The request keeps body, and the raw JSON it echoes (tools, tool_choice,
// text.format) aliases it: body must not change after.
func DecodeCreateRequest(body []byte) (*CreateRequest, error) {
	fields, err := decodeObject(body, "")
	if err != nil {
		return nil, err
	}
	return decodeCreate(fields, body)
}

// DecodeCreateRequestCopy is DecodeCreateRequest of a body the caller
// reuses once it returns (a staged body): the request copies all it keeps,
// the body itself only for a background response, which is run from it.
func DecodeCreateRequestCopy(body []byte) (*CreateRequest, error) {
	r, err := DecodeCreateRequest(body)
	if err != nil {
		return nil, err
	}
	r.Body = nil
	if r.Background {
		r.Body = bytes.Clone(body)
	}
	r.ToolChoice = bytes.Clone(r.ToolChoice)
	r.Prompt = bytes.Clone(r.Prompt)
	r.Text.Format = bytes.Clone(r.Text.Format)
	for i := range r.ToolsRaw {
		r.ToolsRaw[i] = bytes.Clone(r.ToolsRaw[i])
	}
	for i := range r.Tools {
		r.Tools[i].Parameters = bytes.Clone(r.Tools[i].Parameters)
	}
	return r, nil
}

// DecodeCreateFields is DecodeCreateRequest of a body already split into
// its members (a WebSocket response.create, less its own members), each
// decoded once, here. The request keeps no raw body, which a background
// response is run again from: the caller refuses background.
func DecodeCreateFields(fields map[string]json.RawMessage) (*CreateRequest, error) {
	return decodeCreate(fields, nil)
}

func decodeCreate(fields map[string]json.RawMessage, body []byte) (*CreateRequest, error) {
	r := &CreateRequest{Store: true, Truncation: "disabled", Body: body}
	// Decode in a fixed order so the same bad body always names the same param.
	for _, k := range sortedKeys(fields) {
		raw := fields[k]
		if isNull(raw) {
			continue
		}
		if err := r.decodeField(k, raw); err != nil {
			return nil, err
		}
	}
	if r.Model == "" {
		return nil, Invalidf("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	}
	if _, ok := fields["input"]; !ok || isNull(fields["input"]) {
		return nil, Invalidf("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	}
	if r.Background && len(r.MCP) > 0 {
		return nil, Invalidf("background", "unsupported_value", "MCP tools are run in foreground responses only; leave out 'background'.")
	}
	if r.Background && !r.Store {
		return nil, Invalidf("background", "invalid_value", "Background mode requires 'store' to be true.")
	}
	if r.Conversation != "" && r.PreviousResponseID != "" {
		return nil, Invalidf("previous_response_id", "mutually_exclusive_parameters",
			"Parameters 'previous_response_id' and 'conversation' cannot be used together.")
	}
	if len(r.ToolChoice) > 0 && len(r.ToolsRaw) == 0 && !bytes.Equal(r.ToolChoice, []byte(`"none"`)) && !bytes.Equal(r.ToolChoice, []byte(`"auto"`)) {
		return nil, Invalidf("tool_choice", "invalid_value", "Invalid 'tool_choice': tools must be given when tool_choice requires a tool.")
	}
	r.resolveToolChoice()
	if r.Text.Format == nil {
		r.Text.Format = json.RawMessage(`{"type":"text"}`)
	}
	return r, nil
}

func (r *CreateRequest) decodeField(k string, raw json.RawMessage) error {
	var err error
	switch k {
	case "model":
		r.Model, err = decodeString(raw, k)
	case "input":
		r.Input, err = decodeInput(raw)
	case "instructions":
		r.Instructions, err = ptr(decodeString(raw, k))
	case "previous_response_id":
		r.PreviousResponseID, err = decodeString(raw, k)
	case "conversation":
		r.Conversation, err = decodeConversationParam(raw)
	case "store":
		r.Store, err = decodeBool(raw, k)
	case "stream":
		r.Stream, err = decodeBool(raw, k)
	case "background":
		r.Background, err = decodeBool(raw, k)
	case "tools":
		err = r.decodeTools(raw)
	case "tool_choice":
		r.ToolChoice = raw
		r.EngineChoice, err = decodeToolChoice(raw)
	case "parallel_tool_calls":
		r.ParallelToolCalls, err = ptr(decodeBool(raw, k))
	case "max_output_tokens":
		r.MaxOutputTokens, err = ptr(decodeInt(raw, k, 1))
	case "max_tool_calls":
		r.MaxToolCalls, err = ptr(decodeInt(raw, k, 0))
	case "temperature":
		r.Temperature, err = ptr(decodeNumber(raw, k, 0, 2))
	case "top_p":
		r.TopP, err = ptr(decodeNumber(raw, k, 0, 1))
	case "top_logprobs":
		r.TopLogprobs, err = ptr(decodeIntRange(raw, k, 0, maxTopLogprobs))
	case "metadata":
		r.Metadata, err = DecodeMetadata(raw)
	case "truncation":
		r.Truncation, err = decodeEnum(raw, k, "auto", "disabled")
	case "text":
		r.Text, err = decodeText(raw)
	case "service_tier":
		r.ServiceTier, err = decodeEnum(raw, k, "auto", "default", "flex", "scale", "priority", "fast", "ultrafast")
		if r.ServiceTier == "fast" {
			r.ServiceTier = "priority"
		}
	case "prompt_cache_key":
		r.PromptCacheKey, err = ptr(decodeString(raw, k))
	case "safety_identifier":
		r.SafetyIdentifier, err = ptr(decodeString(raw, k))
	case "user":
		r.User, err = ptr(decodeString(raw, k))
	case "include":
		r.Include, err = decodeList(raw, k, "an array of strings", func(e json.RawMessage, p string) (string, error) {
			return decodeEnum(e, p, includables...)
		})
	case "reasoning":
		r.Reasoning, err = decodeReasoning(raw)
	case "prompt_cache_retention":
		r.PromptCacheRetention, err = ptr(decodeEnum(raw, k, "in_memory", "24h"))
	case "context_management":
		r.CompactThreshold, err = decodeContextManagement(raw)
	case "prompt":
		if err = decodePrompt(raw); err == nil {
			r.Prompt = raw
		}
	default:
		if check, ok := acceptedOptions[k]; ok {
			return check(raw, k)
		}
		return unknownParam(k)
	}
	return err
}

func unknownParam(p string) *apierror.Error {
	return Invalidf(p, "unknown_parameter", "Unknown parameter: '%s'.", p)
}

// DecodeItems decodes a list of input items (POST conversations and their
// items); param names the list in errors.
func DecodeItems(raw json.RawMessage, param string) ([]Item, error) {
	return decodeList(raw, param, "an array", decodeItem)
}

// decodeList decodes a JSON array element by element, naming the element
// ("param[i]") in any error; want describes the array in a type error.
func decodeList[T any](raw json.RawMessage, param, want string, elem func(json.RawMessage, string) (T, error)) ([]T, error) {
	if kindOf(raw) != "an array" {
		return nil, typeError(param, want, raw)
	}
	var elems []json.RawMessage
	if jsonscan.Elements(raw, func(e []byte) error {
		elems = append(elems, e)
		return nil
	}) != nil {
		return nil, typeError(param, want, raw)
	}
	out := make([]T, 0, len(elems))
	for i, e := range elems {
		v, err := elem(e, fmt.Sprintf("%s[%d]", param, i))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func decodeInput(raw json.RawMessage) ([]Item, error) {
	if raw[0] == '"' {
		s, err := decodeString(raw, "input")
		if err != nil {
			return nil, err
		}
		return []Item{{Type: ItemMessage, Role: "user", Content: []ContentPart{{Type: "input_text", Text: s}}}}, nil
	}
	items, err := DecodeItems(raw, "input")
	if err != nil {
		if e, ok := err.(*apierror.Error); ok && e.Param == "input" && e.Code == "invalid_type" {
			return nil, Invalidf("input", "invalid_type", "Invalid type for 'input': expected a string or an array of input items, but got %s instead.", kindOf(raw))
		}
	}
	return items, err
}

func decodeItem(raw json.RawMessage, param string) (Item, error) {
	f, err := decodeObject(raw, param)
	if err != nil {
		return Item{}, err
	}
	typ := "message"
	if t, ok := f["type"]; ok {
		if typ, err = decodeString(t, param+".type"); err != nil {
			return Item{}, err
		}
	}
	it := Item{Type: typ}
	str := func(k string, required bool) (string, error) {
		v, ok := f[k]
		if !ok || isNull(v) {
			if required {
				return "", Invalidf(param+"."+k, "missing_required_parameter", "Missing required parameter: '%s.%s'.", param, k)
			}
			return "", nil
		}
		return decodeString(v, param+"."+k)
	}
	if it.ID, err = str("id", typ == ItemReference); err != nil {
		return it, err
	}
	if it.Status, err = str("status", false); err != nil {
		return it, err
	}
	switch typ {
	case ItemMessage:
		if err := allowKeys(f, param, "type", "id", "status", "role", "content", "phase"); err != nil {
			return it, err
		}
		// phase tells an assistant's commentary from its final answer;
		// the engine's template has no place for it.
		if err := optionalEnum(f, param+".", "phase", "commentary", "final_answer"); err != nil {
			return it, err
		}
		if it.Role, err = decodeEnum(f["role"], param+".role", "user", "assistant", "system", "developer"); err != nil {
			return it, err
		}
		c, ok := f["content"]
		if !ok || isNull(c) {
			return it, Invalidf(param+".content", "missing_required_parameter", "Missing required parameter: '%s.content'.", param)
		}
		it.Content, err = decodeContent(c, param+".content", it.Role)
	case ItemFunctionCall, ItemCustomToolCall:
		// A custom tool's call has its input where a function's has its
		// arguments.
		args := "arguments"
		if typ == ItemCustomToolCall {
			args = "input"
		}
		if err := allowKeys(f, param, "type", "id", "status", "call_id", "name", args, "namespace", "async", "caller"); err != nil {
			return it, err
		}
		if err := checkCallExtras(f, param); err != nil {
			return it, err
		}
		if it.CallID, err = str("call_id", true); err != nil {
			return it, err
		}
		if it.Name, err = str("name", true); err != nil {
			return it, err
		}
		if it.Namespace, err = str("namespace", false); err != nil {
			return it, err
		}
		it.Arguments, err = str(args, true)
	case ItemFunctionCallOutput, ItemCustomToolCallOutput:
		keys := []string{"type", "id", "status", "call_id", "output", "caller", "name", "namespace"}
		if typ == ItemCustomToolCallOutput {
			keys = keys[:6]
		}
		if err := allowKeys(f, param, keys...); err != nil {
			return it, err
		}
		if err := checkCallExtras(f, param); err != nil {
			return it, err
		}
		// The output answers its call by call_id; the name and namespace
		// it may repeat are the call's.
		for _, k := range []string{"name", "namespace"} {
			if _, err := str(k, false); err != nil {
				return it, err
			}
		}
		if it.CallID, err = str("call_id", true); err != nil {
			return it, err
		}
		o, ok := f["output"]
		if !ok || isNull(o) {
			return it, Invalidf(param+".output", "missing_required_parameter", "Missing required parameter: '%s.output'.", param)
		}
		if o[0] == '"' {
			it.Output, err = decodeString(o, param+".output")
		} else {
			var parts []ContentPart
			parts, err = decodeContent(o, param+".output", "user")
			it.Output = (&Item{Content: parts}).Text()
		}
	case ItemReference:
		err = allowKeys(f, param, "type", "id")
	case ItemReasoning:
		if err := allowKeys(f, param, "type", "id", "status", "summary", "content", "encrypted_content"); err != nil {
			return it, err
		}
		if it.Summary, err = decodeParts(f["summary"], param+".summary", "summary_text", true); err != nil {
			return it, err
		}
		if it.Content, err = decodeParts(f["content"], param+".content", "reasoning_text", false); err != nil {
			return it, err
		}
		it.EncryptedContent, err = str("encrypted_content", false)
	case ItemMCPListTools, ItemMCPCall, ItemMCPApprovalRequest, ItemMCPApprovalResponse:
		return it, decodeMCPItem(f, param, &it)
	case ItemCompaction:
		if err := allowKeys(f, param, "type", "id", "encrypted_content", "created_by"); err != nil {
			return it, err
		}
		if _, err := str("created_by", false); err != nil {
			return it, err
		}
		it.EncryptedContent, err = str("encrypted_content", true)
	default:
		return it, Invalidf(param+".type", "invalid_value",
			"Invalid value: '%s'. Supported values are: 'message', 'function_call', 'function_call_output', 'reasoning', 'compaction', 'mcp_list_tools', 'mcp_call', 'mcp_approval_request', 'mcp_approval_response', 'custom_tool_call', 'custom_tool_call_output' and 'item_reference'.", typ)
	}
	if err == nil && it.Status != "" && it.Status != "completed" && it.Status != "incomplete" && it.Status != "in_progress" {
		err = Invalidf(param+".status", "invalid_value", "Invalid value: '%s'. Supported values are: 'in_progress', 'completed' and 'incomplete'.", it.Status)
	}
	return it, err
}

// checkCallExtras checks a call item's fields for OpenAI's own tool
// execution (async, caller), which turnpike accepts and does not act on.
func checkCallExtras(f map[string]json.RawMessage, param string) error {
	if v, ok := f["async"]; ok && !isNull(v) {
		if _, err := decodeBool(v, param+".async"); err != nil {
			return err
		}
	}
	if v, ok := f["caller"]; ok && !isNull(v) && kindOf(v) != "an object" {
		return typeError(param+".caller", "an object", v)
	}
	return nil
}

// decodeParts reads a reasoning item's summary or content: an array of
// parts of type typ, each with its text; required says the array must be
// there (it may be empty).
func decodeParts(raw json.RawMessage, param, typ string, required bool) ([]ContentPart, error) {
	if isNull(raw) {
		if required {
			return nil, Invalidf(param, "missing_required_parameter", "Missing required parameter: '%s'.", param)
		}
		return nil, nil
	}
	return decodeList(raw, param, "an array", func(e json.RawMessage, p string) (ContentPart, error) {
		f, err := decodeObject(e, p)
		if err != nil {
			return ContentPart{}, err
		}
		if err := allowKeys(f, p, "type", "text"); err != nil {
			return ContentPart{}, err
		}
		if _, err := decodeEnum(f["type"], p+".type", typ); err != nil {
			return ContentPart{}, err
		}
		text, err := decodeString(f["text"], p+".text")
		return ContentPart{Type: typ, Text: text}, err
	})
}

// decodeContent reads a message's content: a string or text parts.
func decodeContent(raw json.RawMessage, param, role string) ([]ContentPart, error) {
	defType := "input_text"
	if role == "assistant" {
		defType = "output_text"
	}
	if raw[0] == '"' {
		s, err := decodeString(raw, param)
		return []ContentPart{{Type: defType, Text: s}}, err
	}
	var elems []json.RawMessage
	if kindOf(raw) != "an array" || json.Unmarshal(raw, &elems) != nil {
		return nil, typeError(param, "a string or an array of content parts", raw)
	}
	parts := make([]ContentPart, 0, len(elems))
	for i, e := range elems {
		p := fmt.Sprintf("%s[%d]", param, i)
		f, err := decodeObject(e, p)
		if err != nil {
			return nil, err
		}
		typ, err := decodeString(f["type"], p+".type")
		if err != nil {
			return nil, err
		}
		switch typ {
		case "input_text", "output_text", "text":
			if err := allowKeys(f, p, "type", "text", "annotations", "logprobs", "prompt_cache_breakpoint"); err != nil {
				return nil, err
			}
			// A cache breakpoint marks where OpenAI may cache a prefix;
			// engines cache every prefix by themselves.
			if v, ok := f["prompt_cache_breakpoint"]; ok && !isNull(v) && kindOf(v) != "an object" {
				return nil, typeError(p+".prompt_cache_breakpoint", "an object", v)
			}
		case "input_image", "input_file", "input_audio", "refusal":
			return nil, Invalidf(p+".type", "unsupported_value", "Content parts of type '%s' are not supported by this gateway.", typ)
		default:
			return nil, Invalidf(p+".type", "invalid_value", "Invalid value: '%s'. Supported values are: 'input_text' and 'output_text'.", typ)
		}
		text, err := decodeString(f["text"], p+".text")
		if err != nil {
			return nil, err
		}
		if typ == "text" {
			typ = defType
		}
		parts = append(parts, ContentPart{Type: typ, Text: text})
	}
	return parts, nil
}

func decodeText(raw json.RawMessage) (TextConfig, error) {
	var t TextConfig
	f, err := decodeObject(raw, "text")
	if err != nil {
		return t, err
	}
	if err := allowKeys(f, "text", "format", "verbosity"); err != nil {
		return t, err
	}
	if v, ok := f["verbosity"]; ok && !isNull(v) {
		s, err := decodeEnum(v, "text.verbosity", "low", "medium", "high")
		if err != nil {
			return t, err
		}
		t.Verbosity = &s
	}
	fm, ok := f["format"]
	if !ok || isNull(fm) {
		return t, nil
	}
	ff, err := decodeObject(fm, "text.format")
	if err != nil {
		return t, err
	}
	typ, err := decodeEnum(ff["type"], "text.format.type", "text", "json_object", "json_schema")
	if err != nil {
		return t, err
	}
	switch typ {
	case "json_schema":
		if err := allowKeys(ff, "text.format", "type", "name", "schema", "strict", "description"); err != nil {
			return t, err
		}
		if _, err := decodeString(ff["name"], "text.format.name"); err != nil {
			return t, err
		}
		if s := ff["schema"]; kindOf(s) != "an object" {
			return t, typeError("text.format.schema", "an object", s)
		}
		if s, ok := ff["strict"]; ok && !isNull(s) {
			if _, err := decodeBool(s, "text.format.strict"); err != nil {
				return t, err
			}
		}
		if s, ok := ff["description"]; ok && !isNull(s) {
			if _, err := decodeString(s, "text.format.description"); err != nil {
				return t, err
			}
		}
	default:
		if err := allowKeys(ff, "text.format", "type"); err != nil {
			return t, err
		}
	}
	t.Format = fm
	return t, nil
}

func decodeReasoning(raw json.RawMessage) (*Reasoning, error) {
	f, err := decodeObject(raw, "reasoning")
	if err != nil {
		return nil, err
	}
	if err := allowKeys(f, "reasoning", "effort", "summary", "generate_summary", "context", "mode"); err != nil {
		return nil, err
	}
	// context and mode choose how OpenAI's reasoning models carry their
	// reasoning; checked, and nothing for an engine.
	if err := optionalEnum(f, "reasoning.", "context", "auto", "current_turn", "all_turns"); err != nil {
		return nil, err
	}
	if err := optionalEnum(f, "reasoning.", "mode", "standard", "pro"); err != nil {
		return nil, err
	}
	r := &Reasoning{}
	if v, ok := f["effort"]; ok && !isNull(v) {
		s, err := decodeEnum(v, "reasoning.effort", "none", "minimal", "low", "medium", "high", "xhigh", "max")
		if err != nil {
			return nil, err
		}
		r.Effort = &s
	}
	for _, k := range []string{"summary", "generate_summary"} {
		if v, ok := f[k]; ok && !isNull(v) {
			s, err := decodeEnum(v, "reasoning."+k, "auto", "concise", "detailed")
			if err != nil {
				return nil, err
			}
			r.Summary = &s
		}
	}
	return r, nil
}

func decodeConversationParam(raw json.RawMessage) (string, error) {
	if raw[0] == '"' {
		return decodeString(raw, "conversation")
	}
	f, err := decodeObject(raw, "conversation")
	if err != nil {
		return "", typeError("conversation", "a string or an object", raw)
	}
	if err := allowKeys(f, "conversation", "id"); err != nil {
		return "", err
	}
	return decodeString(f["id"], "conversation.id")
}

// DecodeMetadata reads a metadata object: at most 16 string pairs, keys up
// to 64 and values up to 512 characters.
func DecodeMetadata(raw json.RawMessage) (map[string]string, error) {
	f, err := decodeObject(raw, "metadata")
	if err != nil {
		return nil, err
	}
	if len(f) > MaxMetadataKeys {
		return nil, Invalidf("metadata", "object_above_max_properties", "Invalid 'metadata': too many properties. Expected an object with at most %d properties, but got %d instead.", MaxMetadataKeys, len(f))
	}
	m := make(map[string]string, len(f))
	for k, v := range f {
		if len(k) > maxMetadataKeyLen {
			return nil, Invalidf("metadata", "string_above_max_length", "Invalid 'metadata': key '%s' is longer than %d characters.", k, maxMetadataKeyLen)
		}
		s, err := decodeString(v, "metadata."+k)
		if err != nil {
			return nil, err
		}
		if len(s) > maxMetadataValueLen {
			return nil, Invalidf("metadata."+k, "string_above_max_length", "Invalid 'metadata.%s': string too long. Expected a string with maximum length %d.", k, maxMetadataValueLen)
		}
		m[k] = s
	}
	return m, nil
}

// decodeObject reads a JSON object into its fields, each value aliasing
// raw. param "" is the body: one that is not JSON, or not an object, is
// invalid_json, with encoding/json's words for what is wrong.
//
// jsonscan.Members checks the object as encoding/json does in the same pass
// that splits it, so each level of a body is read once, not once to check
// and again to split as json.Unmarshal would. Duplicate keys keep the last
// value, as encoding/json does; an object with a key that is not UTF-8 is
// left to encoding/json, which reads it with U+FFFD in place of the bad
// bytes.
func decodeObject(raw json.RawMessage, param string) (map[string]json.RawMessage, error) {
	if param != "" && kindOf(raw) != "an object" {
		return nil, typeError(param, "an object", raw)
	}
	f := make(map[string]json.RawMessage, 8)
	err := jsonscan.Members(raw, func(k, v []byte) error {
		if !utf8.Valid(k) {
			return errKeyNotUTF8
		}
		f[string(k)] = v
		return nil
	})
	if err == nil {
		return f, nil
	}
	return decodeObjectSlowly(raw, param)
}

// errKeyNotUTF8 sends decodeObject to encoding/json.
var errKeyNotUTF8 = errors.New("responses: a key that is not UTF-8")

// decodeObjectSlowly is decodeObject with encoding/json: the words of its
// errors, and its reading of keys that are not UTF-8.
func decodeObjectSlowly(raw json.RawMessage, param string) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if param == "" {
		if !json.Valid(raw) {
			var v any
			err := json.Unmarshal(raw, &v)
			msg := "invalid JSON"
			if err != nil {
				msg = err.Error()
			}
			return nil, Invalidf("", "invalid_json", "We could not parse the JSON body of your request: %s.", msg)
		}
		if kindOf(raw) != "an object" {
			return nil, Invalidf("", "invalid_json", "The request body must be a JSON object.")
		}
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, typeError(param, "an object", raw)
	}
	return f, nil
}

func allowKeys(f map[string]json.RawMessage, param string, allowed ...string) error {
	var unknown []string
	for k := range f {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return unknownParam(param + "." + unknown[0])
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// kindOf names a JSON value's type the way OpenAI's errors do.
func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	if bytes.ContainsAny(raw, ".eE") {
		return "a decimal"
	}
	return "an integer"
}

func typeError(param, want string, raw json.RawMessage) *apierror.Error {
	return Invalidf(param, "invalid_type", "Invalid type for '%s': expected %s, but got %s instead.", param, want, kindOf(raw))
}

func decodeString(raw json.RawMessage, param string) (string, error) {
	if kindOf(raw) != "a string" {
		if isNull(raw) {
			return "", Invalidf(param, "missing_required_parameter", "Missing required parameter: '%s'.", param)
		}
		return "", typeError(param, "a string", raw)
	}
	s, err := jsonscan.String(raw)
	if err != nil {
		return "", typeError(param, "a string", raw)
	}
	// A string kept past the request (a model name, an item's text in a
	// chain) must not keep the whole body alive: one that aliases it is
	// copied. One with escapes was decoded into a buffer of its own,
	// sized from its raw JSON.
	if len(s) > 0 && within(raw, unsafe.StringData(s)) {
		return strings.Clone(s), nil
	}
	return s, nil
}

// within reports whether p points into b.
func within(b []byte, p *byte) bool {
	if len(b) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	at := uintptr(unsafe.Pointer(p))
	return at >= start && at < start+uintptr(len(b))
}

// ptr is a decoder's result as the optional field it fills: a pointer,
// set even when err is not nil (the caller stops at the error).
func ptr[T any](v T, err error) (*T, error) { return &v, err }

func decodeBool(raw json.RawMessage, param string) (bool, error) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, typeError(param, "a boolean", raw)
}

func decodeNumber(raw json.RawMessage, param string, lo, hi float64) (float64, error) {
	k := kindOf(raw)
	if k != "an integer" && k != "a decimal" {
		return 0, typeError(param, "a number", raw)
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(raw)), 64)
	if err != nil {
		return 0, typeError(param, "a number", raw)
	}
	if f < lo {
		return 0, Invalidf(param, "decimal_below_min_value", "Invalid '%s': decimal below minimum value. Expected a value >= %g, but got %g instead.", param, lo, f)
	}
	if f > hi {
		return 0, Invalidf(param, "decimal_above_max_value", "Invalid '%s': decimal above maximum value. Expected a value <= %g, but got %g instead.", param, hi, f)
	}
	return f, nil
}

// decodeIntRange is decodeInt bounded above by hi too.
func decodeIntRange(raw json.RawMessage, param string, lo, hi int) (int, error) {
	n, err := decodeInt(raw, param, lo)
	if err == nil && n > hi {
		return 0, Invalidf(param, "integer_above_max_value", "Invalid '%s': integer above maximum value. Expected a value <= %d, but got %d instead.", param, hi, n)
	}
	return n, err
}

func decodeInt(raw json.RawMessage, param string, lo int) (int, error) {
	if kindOf(raw) != "an integer" {
		return 0, typeError(param, "an integer", raw)
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(raw)))
	if err != nil {
		return 0, Invalidf(param, "integer_above_max_value", "Invalid '%s': integer out of range.", param)
	}
	if n < lo {
		return 0, Invalidf(param, "integer_below_min_value", "Invalid '%s': integer below minimum value. Expected a value >= %d, but got %d instead.", param, lo, n)
	}
	return n, nil
}

func decodeEnum(raw json.RawMessage, param string, values ...string) (string, error) {
	s, err := decodeString(raw, param)
	if err != nil {
		return "", err
	}
	if !slices.Contains(values, s) {
		return "", Invalidf(param, "invalid_value", "Invalid value: '%s'. Supported values are: %s.", s, quoteList(values))
	}
	return s, nil
}
