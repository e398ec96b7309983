package wire

import (
	"encoding/json"
	"strings"

	"github.com/turnpike-gateway/turnpike/apierror"
)

// Compacted is the answer to POST /v1/responses/compact.
type Compacted struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	CreatedAt int64  `json:"created_at"`
	// Output is the context's user messages, then the compaction item.
	Output []Item `json:"output"`
	Usage  Usage  `json:"usage"`
}

// compactKeys are the fields of a compact request.
var compactKeys = []string{
	"model", "input", "instructions", "previous_response_id", "prompt_cache_key",
	"prompt_cache_options", "prompt_cache_retention", "service_tier", "image",
}

// DecodeCompactRequest decodes a POST /v1/responses/compact body as
// strictly as a create request: its fields are those of a create request
// that compaction takes; input or previous_response_id names what to
// compact.
func DecodeCompactRequest(body []byte) (*CreateRequest, error) {
	return decodeStateless(body, compactKeys, func(f map[string]json.RawMessage) error {
		if in, ok := f["input"]; (!ok || isNull(in)) && isNull(f["previous_response_id"]) {
			return Invalidf("input", "missing_required_parameter", "Missing required parameter: 'input' (or 'previous_response_id').")
		}
		return nil
	})
}

// decodeStateless decodes body as a create request that takes only the
// fields keys names, checked by check (nil checks nothing), that stores
// nothing and whose input, when absent or null, is empty.
func decodeStateless(body []byte, keys []string, check func(map[string]json.RawMessage) error) (*CreateRequest, error) {
	f, err := decodeObject(body, "")
	if err != nil {
		return nil, err
	}
	if err := allowKeys(f, "", keys...); err != nil {
		e := err.(*apierror.Error)
		return nil, unknownParam(strings.TrimPrefix(e.Param, "."))
	}
	if check != nil {
		if err := check(f); err != nil {
			return nil, err
		}
	}
	if in, ok := f["input"]; !ok || isNull(in) {
		f["input"] = json.RawMessage(`[]`)
	}
	f["store"] = json.RawMessage(`false`)
	b, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	return DecodeCreateRequest(b)
}

// Compact summarises the context req names (its previous response's and
// its input) and answers with the user messages and a compaction item a

// InputTokens is the answer to POST /v1/responses/input_tokens: how many
// tokens the prompt of a create request with the same fields would be,
// as the engine receives it (the model's chat template and generation
// prompt included, counted with the model's tokenizer).
type InputTokens struct {
	Object      string `json:"object"`
	InputTokens int    `json:"input_tokens"`
}

// inputTokensKeys are the fields of an input tokens request: those of a
// create request that shape the prompt.
var inputTokensKeys = []string{
	"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
	"previous_response_id", "conversation", "reasoning", "text", "truncation",
}

// DecodeInputTokensRequest decodes a POST /v1/responses/input_tokens body
// as strictly as a create request, with the fields that shape the prompt;
// input may be left out when previous_response_id or conversation names
// a context.
func DecodeInputTokensRequest(body []byte) (*CreateRequest, error) {
	return decodeStateless(body, inputTokensKeys, nil)
}
