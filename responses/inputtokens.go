package responses

import (
	"context"
	"errors"

	"github.com/turnpike-gateway/turnpike/prompt"
)

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

// InputTokens counts the prompt req would send the engine: its context
// rebuilt as Create rebuilds it (previous response or conversation, then
// the input), fitted to the window when truncation is auto, rendered and
// counted with the model's tokenizer. Nothing is stored or sent.
func (s *Service) InputTokens(ctx context.Context, tenant string, req *CreateRequest) (*InputTokens, error) {
	if s.engine == nil {
		return nil, errors.New("responses: service not started")
	}
	t, items, err := s.load(ctx, tenant, req, nil, newID("resp_"), s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if req.Truncation == "auto" {
		err = s.fit(t, items)
	} else {
		_, t.prompt, err = renderChat(req, items)
	}
	if err != nil {
		return nil, err
	}
	return &InputTokens{Object: "response.input_tokens", InputTokens: prompt.Count(s.engine.Tokenizer(req.Model), t.prompt)}, nil
}
