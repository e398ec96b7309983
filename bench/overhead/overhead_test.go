package overhead

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
	"github.com/turnpike-gateway/turnpike/bench/scrape"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

func TestWantsStream(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       bool
	}{
		{"true", `{"model":"m","stream":true}`, true},
		{"spaced", `{"model":"m", "stream" :  true}`, true},
		{"false", `{"model":"m","stream":false}`, false},
		{"absent", `{"model":"m"}`, false},
		{"stream options only", `{"stream_options":{"include_usage":true}}`, false},
		{"in content", `{"messages":[{"content":"say \"stream\": true"}],"stream":false}`, false},
		{"after messages", `{"messages":[{"content":"x"}],"stream_options":{},"stream":true}`, true},
		{"nested key first", `{"tools":[{"properties":{"stream":{"type":"boolean"}}}],"stream":true}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := wantsStream([]byte(tc.body)); got != tc.want {
				t.Errorf("wantsStream(%s) = %v, want %v", tc.body, got, tc.want)
			}
		})
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis: fields count from the last ')'.
	line := "4242 (turn pike) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 8 0 100 0 0\n"
	if got := parseStatCPU([]byte(line)); got != 3.25 {
		t.Errorf("cpu %v, want 3.25 (325 ticks)", got)
	}
	if got := cpuSeconds(os.Getpid()); got < 0 {
		t.Errorf("own CPU time unreadable: %v", got)
	}
	if got := cpuSeconds(0); got != -1 {
		t.Errorf("pid 0: %v, want -1", got)
	}
}

func TestTailWriter(t *testing.T) {
	var w tailWriter
	var all []byte
	for i := range 50 {
		p := []byte(strings.Repeat(fmt.Sprint(i%10), i%7))
		w.Write(p)
		all = append(all, p...)
	}
	want := all[len(all)-len(w.b):]
	if !bytes.Equal(w.last(), want) {
		t.Errorf("tail %q, want %q", w.last(), want)
	}
}

func TestParseOverheadTarget(t *testing.T) {
	got, err := ParseTarget("tp=http://127.0.0.1:9/,pid=42")
	if err != nil || got != (Target{Name: "tp", URL: "http://127.0.0.1:9", PID: 42}) {
		t.Errorf("got %+v, %v", got, err)
	}
	for _, bad := range []string{"tp", "=http://x", "tp=127.0.0.1:9", "tp=http://x,pid=0", "tp=http://x,cpu=1"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestInstantEngine(t *testing.T) {
	e := NewInstantEngine(InstantConfig{Model: "m", OutputTokens: 3})
	srv := httptest.NewServer(e)
	defer srv.Close()
	body := workload.AgentChatBody("m", false, 4000, 1, 0)

	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		Model   string
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&ans)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ans.Model != "m" || len(ans.Choices) != 1 || len(strings.Fields(ans.Choices[0].Message.Content)) != 3 ||
		ans.Choices[0].FinishReason != "stop" || ans.Usage.PromptTokens != len(body)/workload.BytesPerToken || ans.Usage.TotalTokens != ans.Usage.PromptTokens+3 {
		t.Errorf("answer %+v", ans)
	}

	body = workload.AgentChatBody("m", true, 4000, 1, 0)
	resp, err = http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	var content strings.Builder
	var events, usage int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		events++
		if data == "[DONE]" {
			break
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string }
			}
			Usage *struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		for _, ch := range c.Choices {
			content.WriteString(ch.Delta.Content)
		}
		if c.Usage != nil {
			usage = c.Usage.PromptTokens
		}
	}
	// role, 3 tokens, finish, usage, [DONE]
	if events != 7 || len(strings.Fields(content.String())) != 3 || usage != len(body)/workload.BytesPerToken {
		t.Errorf("%d events, content %q, usage %d", events, content.String(), usage)
	}

	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, err := scrape.ParseEngineMetrics(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if m[scrape.Key(enginemetrics.VLLMGenerationTokens)] != 6 || m[scrape.Key(enginemetrics.VLLMPromptTokens)] == 0 || !m.Has("vllm:num_requests_running") || !m.Has("vllm:cache_config_info") {
		t.Errorf("metrics %v", m)
	}
	for _, path := range []string{"/health", "/v1/models"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %v %v", path, resp.StatusCode, err)
		}
		resp.Body.Close()
	}
}

func TestRunOverhead(t *testing.T) {
	srv := httptest.NewServer(NewInstantEngine(InstantConfig{}))
	defer srv.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadGateway)
	}))
	defer broken.Close()
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			cfg := Config{
				BodyBytes: 8 << 10, Concurrency: 2, Rounds: 2, Stream: stream,
				Duration: workload.Duration(150 * time.Millisecond), Warmup: workload.Duration(20 * time.Millisecond),
				BackendPID: os.Getpid(),
			}
			targets := []Target{{Name: "a", URL: srv.URL, PID: os.Getpid()}, {Name: "b", URL: srv.URL}}
			var progress bytes.Buffer
			res, err := Measure(context.Background(), cfg, targets, &progress)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Targets) != 2 || strings.Count(progress.String(), "\n") != 4 {
				t.Fatalf("%d targets, progress %q", len(res.Targets), progress.String())
			}
			for _, tr := range res.Targets {
				tot := tr.Total
				if len(tr.Runs) != 2 || tot.Requests == 0 || tot.Errors != 0 || tot.P50Ms <= 0 || tot.RPS <= 0 ||
					tot.Requests != tr.Runs[0].Requests+tr.Runs[1].Requests || tr.RPSMin > tr.RPSMax {
					t.Errorf("%s: %+v", tr.Name, tr)
				}
				if (tr.PID == 0) != (tot.CPUSecondsPerRequest == -1) || tot.BackendCPUSecondsPerRequest < 0 || tot.ClientCPUSecondsPerRequest < 0 {
					t.Errorf("%s: CPU %v, engine %v, client %v", tr.Name, tot.CPUSecondsPerRequest, tot.BackendCPUSecondsPerRequest, tot.ClientCPUSecondsPerRequest)
				}
			}
			if _, err := json.Marshal(res); err != nil {
				t.Fatal(err)
			}
			var text bytes.Buffer
			if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "req/s") {
				t.Errorf("table %q, %v", text.String(), err)
			}
		})
	}
	t.Run("broken target", func(t *testing.T) {
		cfg := Config{BodyBytes: 1 << 10, Concurrency: 1, Rounds: 1, Duration: workload.Duration(50 * time.Millisecond), Wait: workload.Duration(300 * time.Millisecond)}
		_, err := Measure(context.Background(), cfg, []Target{{Name: "x", URL: broken.URL}}, nil)
		if err == nil || !strings.Contains(err.Error(), "status 502") {
			t.Errorf("err %v, want the target's status", err)
		}
	})
}

// Each kind of turns makes valid chat bodies: next adds a message to the
// same history, cold changes the opening every time, repeat changes nothing.
func TestTurnBody(t *testing.T) {
	body := workload.AgentChatBody("m", false, 8<<10, 1, 3)
	read := func(b []byte) []map[string]any {
		var req struct{ Messages []map[string]any }
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("%v: %.200s", err, b)
		}
		return req.Messages
	}
	base := read(body)
	if got := turnBody(nil, body, TurnsRepeat, 3, 7); !bytes.Equal(got, body) {
		t.Error("repeat changed the body")
	}
	next := read(turnBody(nil, body, TurnsNext, 3, 7))
	if len(next) != len(base)+1 || next[len(next)-1]["content"] != "Turn 7 of client 3: go on." {
		t.Errorf("next: %d messages, last %v", len(next), next[len(next)-1])
	}
	a, b := read(turnBody(nil, body, TurnsCold, 3, 0)), read(turnBody(nil, body, TurnsCold, 3, 0))
	if len(a) != len(base) || a[1]["content"] == b[1]["content"] || a[1]["content"] == base[1]["content"] {
		t.Errorf("cold: openings %q and %q", a[1]["content"], b[1]["content"])
	}
}

// The instant engine reads the stream flag of the bodies the load
// generator sends.
func TestWantsStreamOfAgentChatBody(t *testing.T) {
	const size = 168 << 10
	b := workload.AgentChatBody("m", true, size, 1, 3)
	if !wantsStream(b) || wantsStream(workload.AgentChatBody("m", false, 1000, 1, 0)) {
		t.Error("the instant engine misreads the generated body's stream flag")
	}
}
