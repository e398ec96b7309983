package sim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// newTestEngine starts an engine behind an httptest server.
func newTestEngine(t *testing.T, cfg Config) (*Engine, *httptest.Server) {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		srv.Close()
		e.Close()
	})
	return e, srv
}

func post(t *testing.T, url, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decode[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	defer resp.Body.Close()
	var v T
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// chatResult is the part of a chat completion the tests read.
type chatResult struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Message struct {
			Role      string     `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []ToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

func chatBody(content string, extra string) string {
	m, _ := json.Marshal(content)
	return `{"model":"llama-3.1-8b","messages":[{"role":"user","content":` + string(m) + `}]` + extra + `}`
}

func TestChatCompletion(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	long := prompt(9, 4000)
	tests := []struct {
		name       string
		body       string
		wantTokens int // 0: any in [minOutputTokens, max]
		max        int
		finish     string
		cached     int
		soft       bool // no max_tokens: the engine's default cap, never "length"
	}{
		{"ignore_eos max_tokens", chatBody("count to ten", `,"max_tokens":17,"ignore_eos":true`), 17, 17, "length", 0, false},
		{"max_completion_tokens wins", chatBody("count to ten", `,"max_tokens":5,"max_completion_tokens":9,"ignore_eos":true`), 9, 9, "length", 0, false},
		{"hash-derived length", chatBody(long, `,"max_tokens":200`), 0, 200, "", 0, false},
		{"repeat hits the cache", chatBody(long, `,"max_tokens":200`), 0, 200, "", 992, false},
		{"default max", chatBody("hi", ``), 0, DefaultMaxTokens, "stop", 0, true},
	}
	var texts []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, url, tt.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			r := decode[chatResult](t, resp)
			if r.Object != "chat.completion" || len(r.Choices) != 1 || r.Choices[0].Message.Content == nil {
				t.Fatalf("bad response %+v", r)
			}
			u := r.Usage
			if tt.wantTokens != 0 && u.CompletionTokens != tt.wantTokens {
				t.Errorf("completion tokens %d, want %d", u.CompletionTokens, tt.wantTokens)
			}
			if u.CompletionTokens < minOutputTokens || u.CompletionTokens > tt.max {
				t.Errorf("completion tokens %d outside [%d, %d]", u.CompletionTokens, minOutputTokens, tt.max)
			}
			if u.TotalTokens != u.PromptTokens+u.CompletionTokens || u.PromptTokensDetails == nil {
				t.Errorf("usage %+v", u)
			}
			if got := u.PromptTokensDetails.CachedTokens; got != tt.cached {
				t.Errorf("cached tokens %d, want %d", got, tt.cached)
			}
			text := *r.Choices[0].Message.Content
			if len(text) != TokenBytes*u.CompletionTokens || strings.Count(text, " ") < u.CompletionTokens/4 {
				t.Errorf("text %q does not look like %d tokens of words", text, u.CompletionTokens)
			}
			finish := r.Choices[0].FinishReason
			if tt.finish != "" && finish != tt.finish {
				t.Errorf("finish %q, want %q", finish, tt.finish)
			}
			if !tt.soft && (finish == "length") != (u.CompletionTokens == tt.max) {
				t.Errorf("finish %q with %d of %d tokens", finish, u.CompletionTokens, tt.max)
			}
			texts = append(texts, text)
		})
	}
	if texts[2] != texts[3] {
		t.Error("the same prompt got different answers")
	}
}

func TestFollowUpTurnReportsCachedTokens(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	msgs := []map[string]any{{"role": "user", "content": prompt(4, 2000)}}
	body := func() string {
		b, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 64, "ignore_eos": true})
		return string(b)
	}
	first := decode[chatResult](t, post(t, url, body()))
	msgs = append(msgs,
		map[string]any{"role": "assistant", "content": *first.Choices[0].Message.Content},
		map[string]any{"role": "user", "content": "go on"})
	second := decode[chatResult](t, post(t, url, body()))
	computed := first.Usage.PromptTokens + first.Usage.CompletionTokens - 1
	if got, want := second.Usage.PromptTokensDetails.CachedTokens, computed/16*16; got != want {
		t.Errorf("second turn: %d cached tokens, want %d", got, want)
	}
}

func TestCompletions(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	resp := post(t, srv.URL+"/v1/completions", `{"model":"llama-3.1-8b","prompt":["once upon a time"],"max_tokens":12,"ignore_eos":true}`)
	r := decode[textCompletion](t, resp)
	if r.Object != "text_completion" || len(r.Choices) != 1 || len(r.Choices[0].Text) != 48 || r.Usage.CompletionTokens != 12 {
		t.Errorf("bad completion %+v", r)
	}
}

func TestRequestErrors(t *testing.T) {
	_, srv := newTestEngine(t, Config{MaxModelLen: 1000, NumBlocks: 20})
	tests := []struct {
		name   string
		path   string
		body   string
		status int
		param  string
	}{
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model"},
		{"over max_model_len", "/v1/chat/completions", chatBody(prompt(1, 3000), `,"max_tokens":300`), 400, "max_tokens"},
		{"never fits the cache", "/v1/chat/completions", chatBody(prompt(1, 1200), `,"max_tokens":100,"ignore_eos":true`), 400, "messages"},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, 400, "messages"},
		{"bad json", "/v1/chat/completions", `{"messages":`, 400, ""},
		{"bad role", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "messages"},
		{"max_tokens 0", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, "max_tokens"},
		{"prompt not string", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt"},
		{"priority without priority scheduling", "/v1/chat/completions", chatBody("x", `,"priority":1`), 400, "priority"},
		{"named tool missing", "/v1/chat/completions", chatBody("x", `,"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":{"type":"function","function":{"name":"b"}}`), 400, "tool_choice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, srv.URL+tt.path, tt.body)
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			b := decode[errorBody](t, resp)
			if b.Error.Message == "" || b.Error.Type == "" || b.Error.Code != tt.status {
				t.Errorf("error body %+v", b.Error)
			}
			if got := ""; b.Error.Param != nil {
				got = *b.Error.Param
				if got != tt.param {
					t.Errorf("param %q, want %q", got, tt.param)
				}
			} else if tt.param != "" {
				t.Errorf("param missing, want %q", tt.param)
			}
		})
	}
}

func TestModelsTokenizeHealth(t *testing.T) {
	e, srv := newTestEngine(t, Config{ServedModelName: "demo", MaxModelLen: 4096})
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	models := decode[modelList](t, resp)
	if len(models.Data) != 1 || models.Data[0].ID != "demo" || models.Data[0].MaxModelLen != 4096 {
		t.Errorf("models %+v", models)
	}

	tok := decode[TokenizeResponse](t, post(t, srv.URL+"/tokenize", `{"model":"demo","prompt":"hello world"}`))
	if tok.Count != 3 || len(tok.Tokens) != 3 || tok.MaxModelLen != 4096 {
		t.Errorf("tokenize prompt %+v", tok)
	}
	tok = decode[TokenizeResponse](t, post(t, srv.URL+"/tokenize", `{"model":"demo","messages":[{"role":"user","content":"hi"}]}`))
	if want := Tokenize("<|user|>\nhi\n<|assistant|>\n"); tok.Count != len(want) {
		t.Errorf("tokenize messages: %d tokens, want %d", tok.Count, len(want))
	}

	for _, healthy := range []bool{true, false} {
		e.SetHealthy(healthy)
		resp, err := http.Get(srv.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if (resp.StatusCode == 200) != healthy {
			t.Errorf("healthy %v: status %d", healthy, resp.StatusCode)
		}
	}
}

// sseEvent is one streamed event and when it arrived.
type sseEvent struct {
	data string
	at   time.Time
}

// readSSE reads events until [DONE] or the end of the body, and returns
// the error that ended it (nil after [DONE]).
func readSSE(resp *http.Response) ([]sseEvent, error) {
	defer resp.Body.Close()
	var events []sseEvent
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return events, err
		}
		data, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return events, nil
		}
		events = append(events, sseEvent{data, time.Now()})
	}
}

type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Role      string     `json:"role"`
			Content   *string    `json:"content"`
			ToolCalls []ToolCall `json:"tool_calls"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func TestStreamingIsIncremental(t *testing.T) {
	// llama-3.1-8b on an H100 decodes a token in about 7 ms; at scale 0.5
	// 30 tokens take about 100 ms of wall time.
	_, srv := newTestEngine(t, Config{TimeScale: 0.5})
	resp := post(t, srv.URL+"/v1/chat/completions",
		chatBody("tell me a story", `,"max_tokens":30,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}`))
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events, err := readSSE(resp)
	if err != nil {
		t.Fatalf("stream ended with %v", err)
	}
	// role, 30 tokens, finish, usage
	if len(events) != 33 {
		t.Fatalf("%d events, want 33", len(events))
	}
	var text strings.Builder
	for i, ev := range events {
		var c chunk
		if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "chat.completion.chunk" {
			t.Errorf("event %d: object %q", i, c.Object)
		}
		switch {
		case i == 0:
			if c.Choices[0].Delta.Role != "assistant" {
				t.Errorf("first chunk %s", ev.data)
			}
		case i <= 30:
			text.WriteString(*c.Choices[0].Delta.Content)
		case i == 31:
			if f := c.Choices[0].FinishReason; f == nil || *f != "length" {
				t.Errorf("finish chunk %s", ev.data)
			}
		case i == 32:
			if len(c.Choices) != 0 || c.Usage == nil || c.Usage.CompletionTokens != 30 {
				t.Errorf("usage chunk %s", ev.data)
			}
		}
	}
	if text.Len() != 120 {
		t.Errorf("streamed text %q", text.String())
	}
	if spread := events[30].at.Sub(events[1].at); spread < 40*time.Millisecond {
		t.Errorf("tokens arrived within %v: not incremental", spread)
	}
}

func TestToolCalls(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"unit":{"enum":["c","f"]}}}}},
		{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}}]`
	user := `{"role":"user","content":"weather in Paris?"}`
	afterTool := user + `,{"role":"assistant","content":null,"tool_calls":[{"id":"call_x","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_x","content":"sunny"}`
	body := func(msgs, choice string) string {
		b := `{"messages":[` + msgs + `],"tools":` + tools
		if choice != "" {
			b += `,"tool_choice":` + choice
		}
		return b + `}`
	}
	tests := []struct {
		name     string
		body     string
		function string // "" for a text answer
		args     []string
	}{
		{"auto calls the first tool", body(user, ""), "get_weather", []string{"city", "days", "unit"}},
		{"named function", body(user, `{"type":"function","function":{"name":"search"}}`), "search", []string{"query"}},
		{"none answers text", body(user, `"none"`), "", nil},
		{"after a tool result, text", body(afterTool, `"auto"`), "", nil},
		{"required after a tool result", body(afterTool, `"required"`), "get_weather", []string{"city", "days", "unit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := decode[chatResult](t, post(t, url, tt.body))
			again := decode[chatResult](t, post(t, url, tt.body))
			msg := r.Choices[0].Message
			if tt.function == "" {
				if len(msg.ToolCalls) != 0 || msg.Content == nil || r.Choices[0].FinishReason == "tool_calls" {
					t.Fatalf("want a text answer, got %+v", r.Choices[0])
				}
				return
			}
			if len(msg.ToolCalls) != 1 || msg.Content != nil || r.Choices[0].FinishReason != "tool_calls" {
				t.Fatalf("want one tool call, got %+v", r.Choices[0])
			}
			tc := msg.ToolCalls[0]
			if !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" || tc.Function.Name != tt.function {
				t.Errorf("tool call %+v", tc)
			}
			var args map[string]any
			if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
				t.Fatalf("arguments %q: %v", tc.Function.Arguments, err)
			}
			for _, k := range tt.args {
				if _, ok := args[k]; !ok {
					t.Errorf("arguments %s lack %q", tc.Function.Arguments, k)
				}
			}
			if again.Choices[0].Message.ToolCalls[0] != tc {
				t.Errorf("not deterministic: %+v then %+v", tc, again.Choices[0].Message.ToolCalls[0])
			}

			// Streamed, the same call arrives as a header then fragments.
			resp := post(t, url, strings.TrimSuffix(tt.body, "}")+`,"stream":true}`)
			events, err := readSSE(resp)
			if err != nil {
				t.Fatal(err)
			}
			var got ToolCall
			var finish string
			for _, ev := range events {
				var c chunk
				json.Unmarshal([]byte(ev.data), &c)
				if f := c.Choices[0].FinishReason; f != nil {
					finish = *f
				}
				for _, d := range c.Choices[0].Delta.ToolCalls {
					if d.Index == nil || *d.Index != 0 {
						t.Fatalf("delta without index 0: %s", ev.data)
					}
					if d.ID != "" {
						got.ID, got.Type, got.Function.Name = d.ID, d.Type, d.Function.Name
					}
					got.Function.Arguments += d.Function.Arguments
				}
			}
			if got != tc || finish != "tool_calls" {
				t.Errorf("streamed %+v (%s), want %+v", got, finish, tc)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	stream := chatBody("hi", `,"max_tokens":20,"ignore_eos":true,"stream":true`)
	tests := []struct {
		name   string
		fault  string
		body   string
		check  func(t *testing.T, resp *http.Response, err error, took time.Duration)
		client time.Duration
	}{
		{name: "error 503", fault: "error=503", body: chatBody("hi", ""), check: wantStatus(503)},
		{name: "error 429", fault: "error=429", body: chatBody("hi", ""), check: wantStatus(429)},
		{name: "bad header", fault: "explode", body: chatBody("hi", ""), check: wantStatus(400)},
		{name: "latency", fault: "latency=80ms", body: chatBody("hi", ""),
			check: func(t *testing.T, resp *http.Response, err error, took time.Duration) {
				wantStatus(200)(t, resp, err, took)
				if took < 80*time.Millisecond {
					t.Errorf("answered after %v, want at least 80ms", took)
				}
			}},
		{name: "hang", fault: "hang", body: chatBody("hi", ""), client: 100 * time.Millisecond,
			check: func(t *testing.T, resp *http.Response, err error, took time.Duration) {
				if err == nil {
					t.Errorf("hang answered %d", resp.StatusCode)
				}
			}},
		{name: "drop after 5 chunks", fault: "drop-after=5", body: stream,
			check: func(t *testing.T, resp *http.Response, err error, took time.Duration) {
				if err != nil {
					t.Fatal(err)
				}
				events, err := readSSE(resp)
				if err == nil || len(events) != 5 {
					t.Errorf("got %d events and %v, want 5 and a cut", len(events), err)
				}
			}},
		{name: "drop non-streamed", fault: "drop", body: chatBody("hi", ""),
			check: func(t *testing.T, resp *http.Response, err error, took time.Duration) {
				if err == nil {
					t.Errorf("dropped request answered %d", resp.StatusCode)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := &http.Client{Timeout: tt.client}
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(tt.body))
			req.Header.Set(FaultHeader, tt.fault)
			start := time.Now()
			resp, err := client.Do(req)
			tt.check(t, resp, err, time.Since(start))
		})
	}
}

func wantStatus(status int) func(t *testing.T, resp *http.Response, err error, took time.Duration) {
	return func(t *testing.T, resp *http.Response, err error, _ time.Duration) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		b := decode[errorBody](t, resp)
		if resp.StatusCode != status {
			t.Errorf("status %d, want %d", resp.StatusCode, status)
		}
		if status != 200 && (b.Error.Code != status || b.Error.Message == "") {
			t.Errorf("error body %+v", b.Error)
		}
	}
}

func TestFaultRates(t *testing.T) {
	_, srv := newTestEngine(t, Config{ErrorRate: 1, ErrorStatuses: []int{500, 502}})
	for range 10 {
		resp := post(t, srv.URL+"/v1/chat/completions", chatBody("hi", ""))
		resp.Body.Close()
		if resp.StatusCode != 500 && resp.StatusCode != 502 {
			t.Fatalf("status %d with error rate 1", resp.StatusCode)
		}
	}
}

func TestCacheFullRequestsWait(t *testing.T) {
	// 24 blocks hold about three of these requests at once; twelve
	// concurrent ones must queue, not fail.
	e, srv := newTestEngine(t, Config{NumBlocks: 24, TimeScale: 0.05})
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Go(func() {
			resp := post(t, srv.URL+"/v1/completions",
				`{"prompt":"`+prompt(i, 400)+`","max_tokens":24,"ignore_eos":true}`)
			r := decode[textCompletion](t, resp)
			if resp.StatusCode != 200 || r.Usage == nil || r.Usage.CompletionTokens != 24 {
				errs <- errors.New("request failed: " + resp.Status)
			}
		})
	}
	sawWaiting := make(chan bool)
	go func() {
		saw := false
		deadline := time.Now().Add(5 * time.Second)
		for !saw && time.Now().Before(deadline) {
			saw = e.Stats().Waiting > 0
			time.Sleep(time.Millisecond)
		}
		sawWaiting <- saw
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !<-sawWaiting {
		t.Error("no request ever waited")
	}
	if st := e.Stats(); st.UsedBlocks != 0 || st.Running != 0 {
		t.Errorf("after all finished: %+v", st)
	}
}

func TestMetricsExposition(t *testing.T) {
	tests := []struct {
		flavor string
		names  []string
	}{
		{FlavorVLLM, []string{
			"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{",
			`vllm:cache_config_info{block_size="16",max_num_batched_tokens="8192",max_num_seqs="256",num_gpu_blocks="500"} 1`,
			"vllm:prefix_cache_queries_total{", "vllm:prefix_cache_hits_total{",
			"vllm:prompt_tokens_total{", "vllm:generation_tokens_total{",
			"vllm:time_to_first_token_seconds_bucket{", "vllm:inter_token_latency_seconds_bucket{",
			"vllm:e2e_request_latency_seconds_bucket{", `model_name="llama-3.1-8b"`,
		}},
		{FlavorVLLMTPU, []string{
			"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:gpu_cache_usage_perc{",
			"vllm:cache_config_info{", "vllm:gpu_prefix_cache_queries_total{", "vllm:gpu_prefix_cache_hits_total{",
			"vllm:prompt_tokens_total{", "vllm:time_to_first_token_seconds_bucket{",
		}},
		{FlavorSGLang, []string{
			"sglang:num_running_reqs{", "sglang:num_queue_reqs{", "sglang:token_usage{",
			"sglang:cache_hit_rate{", "sglang:cache_config_info{",
			"sglang:prompt_tokens_total{", "sglang:generation_tokens_total{",
			"sglang:time_to_first_token_seconds_bucket{",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.flavor, func(t *testing.T) {
			_, srv := newTestEngine(t, Config{Flavor: tt.flavor, NumBlocks: 500})
			p := prompt(1, 400)
			for range 2 {
				post(t, srv.URL+"/v1/completions", `{"prompt":"`+p+`","max_tokens":8}`).Body.Close()
			}
			resp, err := http.Get(srv.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			text := string(b)
			for _, n := range tt.names {
				if !strings.Contains(text, n) {
					t.Errorf("metrics lack %s", n)
				}
			}
			if tt.flavor == FlavorVLLM && !strings.Contains(text, `vllm:prefix_cache_hits_total{model_name="llama-3.1-8b"} 96`) {
				t.Errorf("prefix hits not counted:\n%s", grep(text, "prefix_cache"))
			}
			if tt.flavor == FlavorVLLMTPU {
				if !strings.Contains(text, `vllm:gpu_prefix_cache_hits_total{model_name="llama-3.1-8b"} 96`) {
					t.Errorf("prefix hits not counted:\n%s", grep(text, "prefix_cache"))
				}
				if strings.Contains(text, "vllm:kv_cache_usage_perc") || strings.Contains(text, "vllm:prefix_cache_hits_total") {
					t.Errorf("the TPU flavour exports the renamed series:\n%s", grep(text, "cache"))
				}
			}
		})
	}
}

func grep(text, sub string) string {
	var out []string
	for l := range strings.Lines(text) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

func TestCloseFailsInFlight(t *testing.T) {
	e, srv := newTestEngine(t, Config{TimeScale: 1})
	done := make(chan int)
	go func() {
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"x","max_tokens":2000,"ignore_eos":true}`))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	for e.Stats().Running == 0 {
		time.Sleep(time.Millisecond)
	}
	e.Close()
	if status := <-done; status != http.StatusServiceUnavailable {
		t.Errorf("in-flight request got %d after Close, want 503", status)
	}
	resp := post(t, srv.URL+"/v1/completions", `{"prompt":"x"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("request after Close got %d", resp.StatusCode)
	}
}

// TestContinueFinalMessage: an answer's start given back as the final
// assistant message (continue_final_message, no generation prompt) is
// continued in place: the start and the continuation are the answer the
// conversation gets in one go, with the budget that was left.
func TestContinueFinalMessage(t *testing.T) {
	_, srv := newTestEngine(t, Config{})
	url := srv.URL + "/v1/chat/completions"
	for _, max := range []int{40, 7} {
		whole := decode[chatResult](t, post(t, url, chatBody("tell me about caches", fmt.Sprintf(`,"max_tokens":%d,"ignore_eos":true`, max))))
		answer := *whole.Choices[0].Message.Content
		given := 5
		if len(answer) < given*TokenBytes+TokenBytes {
			t.Fatalf("answer too short for the fixture: %q", answer)
		}
		start, _ := json.Marshal(answer[:given*TokenBytes])
		body := fmt.Sprintf(`{"model":"llama-3.1-8b","max_tokens":%d,"ignore_eos":true,"continue_final_message":true,"add_generation_prompt":false,"messages":[{"role":"user","content":"tell me about caches"},{"role":"assistant","content":%s}]}`, max-given, start)
		rest := decode[chatResult](t, post(t, url, body))
		if got := answer[:given*TokenBytes] + *rest.Choices[0].Message.Content; got != answer {
			t.Errorf("max %d: start + continuation = %q, want %q", max, got, answer)
		}
		if rest.Choices[0].FinishReason != whole.Choices[0].FinishReason || rest.Usage.CompletionTokens != whole.Usage.CompletionTokens-given {
			t.Errorf("max %d: continuation finish %q, %d tokens; whole %q, %d tokens", max, rest.Choices[0].FinishReason,
				rest.Usage.CompletionTokens, whole.Choices[0].FinishReason, whole.Usage.CompletionTokens)
		}
	}
	resp := post(t, url, `{"model":"llama-3.1-8b","continue_final_message":true,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("continue_final_message without a final assistant message: %d, want 400", resp.StatusCode)
	}
	resp.Body.Close()
}
