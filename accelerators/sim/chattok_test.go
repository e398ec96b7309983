package sim

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// byteTokenizer is a ChatTokenizer unlike the documented rules: a chat
// renders as "[role]content" per message, "[gen]" for the generation
// prompt, and every byte is one token whose id is the byte plus 1000.
type byteTokenizer struct{}

func (byteTokenizer) RenderChat(msgs []ChatMessage, tools json.RawMessage, gen bool) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		if m.Role == "refuse" {
			return "", errors.New("no such role")
		}
		b.WriteString("[" + m.Role + "]" + m.Content.Text())
	}
	if gen {
		b.WriteString("[gen]")
	}
	return b.String(), nil
}

func (byteTokenizer) Encode(dst []uint32, text string) []uint32 {
	for i := 0; i < len(text); i++ {
		dst = append(dst, uint32(text[i])+1000)
	}
	return dst
}

// TestChatTokenizer: with Config.Tokenizer, chats are rendered by its
// template and prompts counted and tokenized by it, in /tokenize and in
// the usage of an answer; a refusal of the template is a 400.
func TestChatTokenizer(t *testing.T) {
	_, srv := newTestEngine(t, Config{ServedModelName: "demo", Tokenizer: byteTokenizer{}})
	want := byteTokenizer{}.Encode(nil, "[user]hi[gen]")
	tok := decode[TokenizeResponse](t, post(t, srv.URL+"/tokenize", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`))
	if !slices.Equal(tok.Tokens, want) || tok.Count != len(want) {
		t.Errorf("tokenize messages: %v, want %v", tok.Tokens, want)
	}
	tok = decode[TokenizeResponse](t, post(t, srv.URL+"/tokenize", `{"model":"demo","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`))
	if !slices.Equal(tok.Tokens, want[:len(want)-len("[gen]")]) {
		t.Errorf("tokenize without the generation prompt: %v", tok.Tokens)
	}
	tok = decode[TokenizeResponse](t, post(t, srv.URL+"/tokenize", `{"model":"demo","prompt":"abc"}`))
	if !slices.Equal(tok.Tokens, []uint32{1097, 1098, 1099}) {
		t.Errorf("tokenize prompt: %v", tok.Tokens)
	}
	c := decode[chatCompletion](t, post(t, srv.URL+"/v1/chat/completions", `{"model":"demo","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	if c.Usage == nil || c.Usage.PromptTokens != len(want) {
		t.Errorf("chat usage %+v, want %d prompt tokens", c.Usage, len(want))
	}
	resp := post(t, srv.URL+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"refuse","content":"hi"}]}`)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("a refused chat: status %d, want 400", resp.StatusCode)
	}
}
