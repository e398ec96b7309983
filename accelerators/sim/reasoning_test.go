package sim

import (
	"io"
	"strings"
	"testing"
)

func TestReasoning(t *testing.T) {
	_, srv := newTestEngine(t, Config{Reasoning: true})
	url := srv.URL + "/v1/chat/completions"
	tools := `,"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}}}]`
	tests := []struct {
		name, extra string
		answer      string // what follows the thinking: "content" or "call"
	}{
		{"text", "", "content"},
		{"ignore_eos", `,"max_tokens":60,"ignore_eos":true`, "content"},
		{"json", schemaFormat(schemaCases[0].schema), "content"},
		{"tool call", tools, "call"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := chatBody("why is the sky blue", tt.extra)
			r := decode[chatAnswer](t, post(t, url, body))
			msg, u := r.Choices[0].Message, r.Usage
			if msg.ReasoningContent == nil || *msg.ReasoningContent == "" {
				t.Fatalf("no reasoning_content: %+v", r.Choices[0])
			}
			if strings.Contains(*msg.ReasoningContent, "think>") {
				t.Errorf("reasoning_content carries the markers: %q", *msg.ReasoningContent)
			}
			if u.CompletionTokensDetails == nil || u.CompletionTokensDetails.ReasoningTokens < minThoughtTokens {
				t.Fatalf("usage %+v: want reasoning_tokens", u)
			}
			reasoning := u.CompletionTokensDetails.ReasoningTokens
			switch tt.answer {
			case "content":
				if msg.Content == nil || *msg.Content == "" || strings.Contains(*msg.Content, "think>") {
					t.Fatalf("content %v", msg.Content)
				}
				if u.CompletionTokens != reasoning+CountTokens(*msg.Content) {
					t.Errorf("completion_tokens %d, want %d reasoning + %d content", u.CompletionTokens, reasoning, CountTokens(*msg.Content))
				}
			case "call":
				if len(msg.ToolCalls) != 1 || r.Choices[0].FinishReason != finishToolCalls {
					t.Fatalf("want a call after the thinking, got %+v", r.Choices[0])
				}
				if u.CompletionTokens <= reasoning {
					t.Errorf("completion_tokens %d, reasoning %d", u.CompletionTokens, reasoning)
				}
			}
			if tt.name == "ignore_eos" && u.CompletionTokens != 60 {
				t.Errorf("ignore_eos: %d completion tokens, want 60", u.CompletionTokens)
			}
			if tt.name == "json" {
				if _, err := decodeSchema([]byte(*msg.Content)); err != nil {
					t.Errorf("JSON after thinking %q: %v", *msg.Content, err)
				}
			}
			again := decode[chatAnswer](t, post(t, url, body))
			if *again.Choices[0].Message.ReasoningContent != *msg.ReasoningContent {
				t.Errorf("thinking not deterministic")
			}

			s := readStreamed(t, post(t, url, streamBody(body)))
			if want := []string{"reasoning", tt.answer}; strings.Join(s.order, ",") != strings.Join(want, ",") {
				t.Errorf("streamed deltas in order %v, want %v", s.order, want)
			}
			if s.reasoning != *msg.ReasoningContent {
				t.Errorf("streamed reasoning %q, want %q", s.reasoning, *msg.ReasoningContent)
			}
			switch tt.answer {
			case "content":
				if s.content != *msg.Content {
					t.Errorf("streamed content %q, want %q", s.content, *msg.Content)
				}
			case "call":
				if s.call != msg.ToolCalls[0] {
					t.Errorf("streamed call %+v, want %+v", s.call, msg.ToolCalls[0])
				}
			}
			if s.finish != r.Choices[0].FinishReason {
				t.Errorf("streamed finish %s, want %s", s.finish, r.Choices[0].FinishReason)
			}
			if s.usage == nil || s.usage.Usage.CompletionTokensDetails == nil ||
				*s.usage.Usage.CompletionTokensDetails != *u.CompletionTokensDetails || s.usage.Usage.CompletionTokens != u.CompletionTokens {
				t.Errorf("streamed usage %+v, want %+v", s.usage, u)
			}
		})
	}
}

// TestReasoningCut: max_tokens that end inside the thinking leave no
// answer, as a reasoning model's do.
func TestReasoningCut(t *testing.T) {
	_, srv := newTestEngine(t, Config{Reasoning: true})
	url := srv.URL + "/v1/chat/completions"
	body := chatBody("why is the sky blue", `,"max_tokens":4`)
	r := decode[chatAnswer](t, post(t, url, body))
	c := r.Choices[0]
	if c.FinishReason != finishLength || c.Message.Content != nil || c.Message.ReasoningContent == nil || *c.Message.ReasoningContent == "" {
		t.Errorf("cut while thinking: %+v", c)
	}
	if d := r.Usage.CompletionTokensDetails; r.Usage.CompletionTokens != 4 || d == nil || d.ReasoningTokens != 4 {
		t.Errorf("usage %+v", r.Usage)
	}
	s := readStreamed(t, post(t, url, streamBody(body)))
	if s.content != "" || s.reasoning != *c.Message.ReasoningContent || s.finish != finishLength {
		t.Errorf("streamed %+v", s)
	}
}

// TestReasoningOff: other models' answers carry no reasoning fields, and
// completions are the same with reasoning on.
func TestReasoningOff(t *testing.T) {
	_, plain := newTestEngine(t, Config{})
	_, thinking := newTestEngine(t, Config{Reasoning: true})
	resp := post(t, plain.URL+"/v1/chat/completions", streamBody(chatBody("hi", "")))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(b), "reasoning") {
		t.Errorf("a model without reasoning streamed %s", b)
	}
	completion := `{"prompt":"once upon a time","max_tokens":16}`
	a := decode[map[string]any](t, post(t, plain.URL+"/v1/completions", completion))
	z := decode[map[string]any](t, post(t, thinking.URL+"/v1/completions", completion))
	if a["choices"].([]any)[0].(map[string]any)["text"] != z["choices"].([]any)[0].(map[string]any)["text"] {
		t.Errorf("completions differ with reasoning on: %v, %v", a["choices"], z["choices"])
	}
}
