package dispatch

import (
	"sync"
	"testing"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// keyedTokenizer is a PromptTokenizer that renders prompts its own way
// (the canonical render, each id plus one, so its ids are told apart
// from Approx's) and records the keys it is handed.
type keyedTokenizer struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyedTokenizer) Encode(dst []uint32, text string) []uint32 {
	n := len(dst)
	dst = prompt.Approx{}.Encode(dst, text)
	for i := n; i < len(dst); i++ {
		dst[i]++
	}
	return dst
}

func (k *keyedTokenizer) Count(text string) int { return prompt.Approx{}.Count(text) }

func (k *keyedTokenizer) EncodePrompt(dst []uint32, p *prompt.Prompt, key string) []uint32 {
	k.mu.Lock()
	k.keys = append(k.keys, key)
	k.mu.Unlock()
	return k.Encode(dst, string(prompt.AppendRender(nil, p))+"<|end|>")
}

func (k *keyedTokenizer) CountPrompt(p *prompt.Prompt) int { return len(k.EncodePrompt(nil, p, "")) }

// TestModelTokenizer: a model's own tokenizer counts and encodes its
// turns, a PromptTokenizer renders them and hears the turn's session key,
// and other models keep the default tokenizer.
func TestModelTokenizer(t *testing.T) {
	e := newEngine(t, streamOK)
	f := newFixture(t, e)
	tok := &keyedTokenizer{}
	d, err := New(Options{Registry: f.reg, Policy: f.probe, Tokenizers: map[string]prompt.Tokenizer{testModel: tok, "other": nil}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Tokenizer(testModel) != prompt.Tokenizer(tok) {
		t.Errorf("Tokenizer(%q) is not the model's", testModel)
	}
	if _, ok := d.Tokenizer("other").(prompt.Approx); !ok {
		t.Errorf("a nil entry does not fall back to the default")
	}
	spec := chatSpec(false)
	tr, err := d.Begin(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.ReadAll(); err != nil {
		t.Fatal(err)
	}
	tr.End(nil)
	<-f.probe.outcomes
	want := len(tok.EncodePrompt(nil, spec.Prompt, ""))
	if got := tr.PromptTokens(); got != want || got == prompt.Count(nil, spec.Prompt) {
		t.Errorf("prompt tokens %d, want the model's tokenizer's %d", got, want)
	}
	if got := f.probe.hashes.Load(); got != int64(want/16) {
		t.Errorf("%d block hashes, want %d", got, want/16)
	}
	if tok.keys[0] != "s1" || tr.SessionKey() != "s1" {
		t.Errorf("EncodePrompt was handed key %q, want the session's %q", tok.keys[0], tr.SessionKey())
	}
	// A spec with a Prior, which Approx would resume, is encoded whole by
	// another tokenizer.
	spec = chatSpec(false)
	spec.Prior = &prompt.Prior{}
	if tr, err = d.Begin(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	tr.ReadAll()
	tr.End(nil)
	<-f.probe.outcomes
	if tr.PromptTokens() != want || len(tok.keys) != 3 {
		t.Errorf("with a Prior: %d tokens, %d encodes", tr.PromptTokens(), len(tok.keys))
	}
}
