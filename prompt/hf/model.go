package hf

import (
	"errors"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// ErrNoTemplate is returned for a chat prompt when the model has no chat
// template.
var ErrNoTemplate = errors.New("hf: the model has no chat template")

// Render is the text the engine receives for p: its messages through the
// chat template with the generation prompt, or a completion's text as is.
func (m *Model) Render(p *prompt.Prompt) (string, error) {
	if p.Messages == nil {
		return p.Text, nil
	}
	if m.Template == nil {
		return "", ErrNoTemplate
	}
	return m.Template.RenderPrompt(p)
}

// EncodePrompt appends the ids of p rendered (Render) to dst. With inc
// and a key, the ids come through inc, so a prompt that extends the last
// one under key is encoded from the seam only.
func (m *Model) EncodePrompt(dst []uint32, p *prompt.Prompt, inc *Incremental, key string) ([]uint32, error) {
	text, err := m.Render(p)
	if err != nil {
		return dst, err
	}
	if inc != nil {
		return inc.Encode(dst, key, text), nil
	}
	return m.Tokenizer.Encode(dst, text), nil
}
