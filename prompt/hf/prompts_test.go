package hf

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/turnpike-gateway/turnpike/prompt"
)

func TestPrompts(t *testing.T) {
	m := qwen(t)
	p := &Prompts{Model: m, Incremental: NewIncremental(m.Tokenizer, 1<<20)}
	turn1 := &prompt.Prompt{Model: "qwen3", Messages: []prompt.Message{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "List three primes."},
	}}
	turn2 := &prompt.Prompt{Model: "qwen3", Messages: append(slices.Clip(turn1.Messages),
		prompt.Message{Role: "assistant", Content: "2, 3, 5."},
		prompt.Message{Role: "user", Content: "And the next three?"})}

	text, err := m.Template.RenderPrompt(turn1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(text, "<|im_start|>assistant\n") {
		t.Fatalf("render lacks the generation prompt: %q", text)
	}
	want1 := m.Tokenizer.Encode(nil, text)
	if got := p.EncodePrompt(nil, turn1, "s"); !slices.Equal(got, want1) {
		t.Errorf("turn 1 ids differ from the template's render encoded")
	}
	if got := prompt.Count(p, turn1); got != len(want1) {
		t.Errorf("prompt.Count = %d, want %d", got, len(want1))
	}
	if got := prompt.Encode(p, nil, turn1); !slices.Equal(got, want1) {
		t.Errorf("prompt.Encode goes past the template")
	}
	text2, _ := m.Template.RenderPrompt(turn2)
	want2 := m.Tokenizer.Encode(nil, text2)
	if got := p.EncodePrompt(nil, turn2, "s"); !slices.Equal(got, want2) {
		t.Errorf("turn 2 ids (incremental) differ from a whole encode")
	}
	if p.Incremental.Hits() != 1 {
		t.Errorf("turn 2 reused no ids: hits = %d", p.Incremental.Hits())
	}

	// A model without a chat template cannot render a chat: the prompt
	// is estimated in canonical form, and counted.
	bare := &Prompts{Model: &Model{Tokenizer: m.Tokenizer}}
	want := m.Tokenizer.Encode(nil, string(prompt.AppendRender(nil, turn1)))
	if got := bare.EncodePrompt(nil, turn1, ""); !slices.Equal(got, want) {
		t.Errorf("no template: ids are not the canonical render's")
	}
	if n := bare.CountPrompt(turn1); n != len(want) || bare.RenderFailures() != 2 {
		t.Errorf("CountPrompt = %d, RenderFailures = %d", n, bare.RenderFailures())
	}
	if n := testutil.CollectAndCount(bare.Collector(nil)); n != 1 {
		t.Errorf("collector without a cache: %d series, want 1", n)
	}
	if n := testutil.CollectAndCount(p.Collector(nil), "turnpike_chat_template_failures_total", "turnpike_token_cache_bytes"); n != 2 {
		t.Errorf("collector series = %d, want 2", n)
	}
}
