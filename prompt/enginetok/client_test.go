package enginetok

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/prompt"
)

// engine is a test double of vLLM's POST /tokenize: it tokenizes with
// prompt.Approx, rendering chats with prompt.AppendRender, and answers
// errors in vLLM's shape. It records the requests it was sent.
type engine struct {
	model string
	delay time.Duration
	// answer, when set, replaces the body of a successful answer.
	answer string

	mu   sync.Mutex
	reqs []map[string]any
}

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(map[string]any{"object": "error", "message": msg, "type": http.StatusText(code), "param": nil, "code": code})
	}
	if r.Method != http.MethodPost || r.URL.Path != "/tokenize" {
		fail(http.StatusNotFound, "Not Found")
		return
	}
	var req tokenizeRequest
	var raw map[string]any
	body := json.NewDecoder(r.Body)
	var buf json.RawMessage
	if err := body.Decode(&buf); err != nil || json.Unmarshal(buf, &req) != nil || json.Unmarshal(buf, &raw) != nil {
		fail(http.StatusBadRequest, "invalid JSON")
		return
	}
	e.mu.Lock()
	e.reqs = append(e.reqs, raw)
	e.mu.Unlock()
	if req.Model != e.model {
		fail(http.StatusNotFound, "The model `"+req.Model+"` does not exist.")
		return
	}
	select {
	case <-time.After(e.delay):
	case <-r.Context().Done():
		return
	}
	var text string
	switch {
	case req.Prompt != nil:
		text = *req.Prompt
	case req.Messages != nil:
		p := &prompt.Prompt{Tools: req.Tools}
		for _, m := range req.Messages {
			pm := prompt.Message{Role: m.Role, Content: m.Content}
			for _, tc := range m.ToolCalls {
				pm.ToolCalls = append(pm.ToolCalls, prompt.ToolCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
			p.Messages = append(p.Messages, pm)
		}
		text = string(prompt.AppendRender(nil, p))
		if req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt {
			text = strings.TrimSuffix(text, "<|assistant|>\n")
		}
	default:
		fail(http.StatusBadRequest, "either prompt or messages is required")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if e.answer != "" {
		w.Write([]byte(e.answer))
		return
	}
	ids := prompt.Approx{}.Encode(nil, text)
	json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "max_model_len": 32768, "tokens": ids, "token_strs": nil})
}

func newEngine(t *testing.T, e *engine) *Client {
	t.Helper()
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &Client{BaseURL: srv.URL + "/", Model: e.model}
}

func TestTokenize(t *testing.T) {
	e := &engine{model: "qwen"}
	c := newEngine(t, e)
	text := "<|im_start|>user\nhello there<|im_end|>\n"
	got, err := c.Tokenize(context.Background(), text)
	if err != nil {
		t.Fatal(err)
	}
	if want := (prompt.Approx{}).Encode(nil, text); !slices.Equal(got, want) {
		t.Errorf("Tokenize = %v, want %v", got, want)
	}
	req := e.reqs[0]
	if req["model"] != "qwen" || req["prompt"] != text || req["add_special_tokens"] != false || req["messages"] != nil {
		t.Errorf("request = %v", req)
	}
	if n := c.Count(text); n != len(got) {
		t.Errorf("Count = %d, want %d", n, len(got))
	}
	if ids := c.Encode([]uint32{9}, text); !slices.Equal(ids, append([]uint32{9}, got...)) {
		t.Errorf("Encode = %v", ids)
	}
	if c.Failures() != 0 {
		t.Errorf("Failures = %d", c.Failures())
	}
}

func TestTokenizeChat(t *testing.T) {
	e := &engine{model: "qwen"}
	c := newEngine(t, e)
	tools := []byte(`[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`)
	msgs := []prompt.Message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "weather in Oslo and Rome?"},
		{Role: "assistant", ToolCalls: []prompt.ToolCall{{Name: "get_weather", Arguments: `{"city":"Oslo"}`}, {Name: "get_weather", Arguments: `{"city":"Rome"}`}}},
		{Role: "tool", Content: "3C"},
		{Role: "tool", Content: "18C"},
	}
	got, err := c.TokenizeChat(context.Background(), msgs, tools, true)
	if err != nil {
		t.Fatal(err)
	}
	want := prompt.Encode(prompt.Approx{}, nil, &prompt.Prompt{Messages: msgs, Tools: tools})
	if !slices.Equal(got, want) {
		t.Errorf("TokenizeChat = %v, want %v", got, want)
	}
	req := e.reqs[0]
	if req["add_generation_prompt"] != true || req["prompt"] != nil || req["tools"] == nil {
		t.Errorf("request = %v", req)
	}
	sent := req["messages"].([]any)
	calls := sent[2].(map[string]any)["tool_calls"].([]any)
	if id := calls[1].(map[string]any)["id"]; id != "call_1" {
		t.Errorf("second call id = %v", id)
	}
	for i, want := range []string{"call_0", "call_1"} {
		if got := sent[3+i].(map[string]any)["tool_call_id"]; got != want {
			t.Errorf("tool message %d answers %v, want %s", i, got, want)
		}
	}
	if _, err := c.TokenizeChat(context.Background(), msgs, []byte(`[{`), true); !errors.Is(err, ErrEngine) {
		t.Errorf("bad tools: err = %v", err)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		engine *engine
		model  string
		want   string
	}{
		{"unknown model", &engine{model: "qwen"}, "llama", "404 Not Found: The model `llama` does not exist."},
		{"timeout", &engine{model: "qwen", delay: time.Second}, "qwen", "deadline exceeded"},
		{"not a tokenization", &engine{model: "qwen", answer: `{"tokens": "x"}`}, "qwen", "not a tokenization"},
		{"no tokens", &engine{model: "qwen", answer: `{"count": 0}`}, "qwen", "no tokens"},
		{"count mismatch", &engine{model: "qwen", answer: `{"tokens": [1, 2], "count": 3}`}, "qwen", "count 3 for 2 tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newEngine(t, tc.engine)
			c.Model = tc.model
			c.Timeout = 50 * time.Millisecond
			_, err := c.Tokenize(context.Background(), "hello")
			if !errors.Is(err, ErrEngine) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrEngine with %q", err, tc.want)
			}
			// Encode and Count fall back and count the failure.
			if got, want := c.Encode(nil, "hello"), (prompt.Approx{}).Encode(nil, "hello"); !slices.Equal(got, want) {
				t.Errorf("Encode = %v, want the fallback's %v", got, want)
			}
			if c.Count("hello") != 2 || c.Failures() != 2 {
				t.Errorf("Count = %d, Failures = %d", c.Count("hello"), c.Failures())
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		c := &Client{BaseURL: srv.URL, Model: "m"}
		if _, err := c.Tokenize(context.Background(), "x"); !errors.Is(err, ErrEngine) || !strings.Contains(err.Error(), "POST "+srv.URL+"/tokenize") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestConcurrent(t *testing.T) {
	c := newEngine(t, &engine{model: "qwen"})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			text := strings.Repeat("word ", i+1)
			if got, want := c.Encode(nil, text), (prompt.Approx{}).Encode(nil, text); !slices.Equal(got, want) {
				t.Errorf("Encode(%q) = %v, want %v", text, got, want)
			}
		})
	}
	wg.Wait()
}

// FuzzParseAnswer checks that any answer gives ids or an ErrEngine error,
// never a panic, and that ids come only with a 200.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{`{"tokens":[1,2],"count":2}`, `{"object":"error","message":"m"}`, `{"error":{"message":"x"}}`, `[`, ``, `{"tokens":[-1]}`} {
		f.Add(200, []byte(s))
		f.Add(400, []byte(s))
	}
	f.Fuzz(func(t *testing.T, code int, data []byte) {
		ids, err := parseAnswer("u", "status", code, data)
		if err != nil && !errors.Is(err, ErrEngine) {
			t.Fatalf("err %v does not wrap ErrEngine", err)
		}
		if err == nil && (code != 200 || ids == nil) {
			t.Fatalf("ids %v with status %d", ids, code)
		}
	})
}

func TestEncodePrompt(t *testing.T) {
	chat := &prompt.Prompt{Model: "qwen", Messages: []prompt.Message{{Role: "user", Content: "hello there"}}}
	text := &prompt.Prompt{Model: "qwen", Text: "once upon a time"}
	t.Run("engine", func(t *testing.T) {
		e := &engine{model: "qwen"}
		c := newEngine(t, e)
		got := c.EncodePrompt([]uint32{7}, chat, "session")
		want := append([]uint32{7}, prompt.Encode(prompt.Approx{}, nil, chat)...)
		if !slices.Equal(got, want) {
			t.Errorf("EncodePrompt = %v, want %v", got, want)
		}
		if req := e.reqs[0]; req["messages"] == nil || req["add_generation_prompt"] != true {
			t.Errorf("chat request = %v, want messages with the generation prompt", req)
		}
		if n := c.CountPrompt(text); n != (prompt.Approx{}).Count(text.Text) {
			t.Errorf("CountPrompt(text) = %d", n)
		}
		if req := e.reqs[1]; req["prompt"] != text.Text {
			t.Errorf("completion request = %v, want the text as prompt", req)
		}
		if c.Failures() != 0 {
			t.Errorf("Failures = %d", c.Failures())
		}
	})
	t.Run("fallback", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		// A fallback that tells itself apart from the engine's answer.
		c := &Client{BaseURL: srv.URL, Model: "qwen", Fallback: fixed{}}
		if got := c.EncodePrompt(nil, chat, ""); !slices.Equal(got, []uint32{42}) {
			t.Errorf("EncodePrompt = %v, want the fallback's", got)
		}
		if n := c.CountPrompt(chat); n != 1 || c.Failures() != 2 {
			t.Errorf("CountPrompt = %d, Failures = %d", n, c.Failures())
		}
	})
}

// fixed encodes every text as the one token 42.
type fixed struct{}

func (fixed) Encode(dst []uint32, _ string) []uint32 { return append(dst, 42) }
func (fixed) Count(string) int                       { return 1 }
