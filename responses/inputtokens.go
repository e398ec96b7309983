package responses

import (
	"context"
	"errors"

	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses/wire"
)

// InputTokens counts the prompt req would send the engine: its context
// rebuilt as Create rebuilds it (previous response or conversation, then
// the input), fitted to the window when truncation is auto, rendered and
// counted with the model's tokenizer. Nothing is stored or sent.
func (s *Service) InputTokens(ctx context.Context, tenant string, req *wire.CreateRequest) (*wire.InputTokens, error) {
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
	return &wire.InputTokens{Object: "response.input_tokens", InputTokens: prompt.Count(s.engine.Tokenizer(req.Model), t.prompt)}, nil
}
