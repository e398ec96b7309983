package hf

import (
	"errors"
	"sync"

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
	text := p.Text
	if p.Messages != nil {
		if m.Template == nil {
			return dst, ErrNoTemplate
		}
		// The text lives only while it is encoded: neither the tokenizer
		// nor inc keeps any of it.
		buf := renderBuffers.Get().(*[]byte)
		defer putRender(buf)
		var err error
		if *buf, err = m.Template.AppendRender((*buf)[:0], p.Messages, p.Tools, true); err != nil {
			return dst, err
		}
		text = unsafeString(*buf)
	}
	if inc != nil {
		return inc.Encode(dst, key, text), nil
	}
	return m.Tokenizer.Encode(dst, text), nil
}

// renderBuffers holds the renderings EncodePrompt encodes, which a long
// session's turns would otherwise allocate anew each time.
var renderBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledRender bounds a rendering kept for reuse: about a 256k-token
// prompt.
const maxPooledRender = 1 << 20

// putRender gives buf back to renderBuffers unless it grew too large to
// keep.
func putRender(buf *[]byte) {
	if cap(*buf) <= maxPooledRender {
		renderBuffers.Put(buf)
	}
}
