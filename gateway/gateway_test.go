package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	"github.com/turnpike-gateway/turnpike/pools"
)

const testModel = gatewaytest.TestModel

// backend is an engine stand-in for proxy tests: the gateway is the code
// under test, the backend only answers as an engine would.
type backend struct {
	*httptest.Server
	hits atomic.Int64
}

func newBackend(t testing.TB, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/metrics" {
			return
		}
		b.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(b.Close)
	return b
}

// okChat answers a chat completion, streamed when asked.
func okChat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Stream bool `json:"stream"`
	}
	json.NewDecoder(r.Body).Decode(&req)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","model":"test-model","choices":[{"index":0,"message":{"role":"assistant","content":"hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":8}}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, tok := range []string{"hello", " there"} {
		fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", tok)
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func newGateway(t testing.TB, policy affinity.Policy, backends ...*backend) (*Server, *httptest.Server, *pools.Registry) {
	t.Helper()
	return newGatewayWith(t, pools.Options{}, policy, backends...)
}

func newGatewayWith(t testing.TB, opts pools.Options, policy affinity.Policy, backends ...*backend) (*Server, *httptest.Server, *pools.Registry) {
	t.Helper()
	var eps []pools.EndpointConfig
	for _, b := range backends {
		eps = append(eps, pools.EndpointConfig{URL: b.URL})
	}
	opts.BreakerFailures, opts.BreakerOpenFor = 3, time.Minute
	reg, err := pools.NewRegistry([]pools.PoolConfig{{
		Name: "p", ServedModels: []string{testModel}, Endpoints: eps,
	}}, opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if policy == nil {
		policy = &affinity.RoundRobin{}
	}
	metrics := prometheus.NewRegistry()
	d, err := dispatch.New(dispatch.Options{Registry: reg, Policy: policy, Logger: slog.New(slog.DiscardHandler), Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, Dispatch: d, Logger: slog.New(slog.DiscardHandler), Metrics: metrics, BodyLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s.Handler())
	t.Cleanup(front.Close)
	return s, front, reg
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const chatBody = `{"model":"test-model","messages":[{"role":"user","content":"hi"}]}`

func TestProxyChatNonStream(t *testing.T) {
	b := newBackend(t, okChat)
	_, front, _ := newGateway(t, nil, b)
	resp := post(t, front.URL, chatBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Error("no x-request-id on the answer")
	}
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	json.NewDecoder(resp.Body).Decode(&out)
	if len(out.Choices) != 1 || out.Choices[0].Message.Content != "hello there" {
		t.Fatalf("unexpected body %+v", out)
	}
}

// firstThenWait is an engine that streams the token "first", then waits
// for release before it streams " second" and ends.
func firstThenWait(release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" second\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}
}

// TestProxyChatStreamIsIncremental holds the engine after its first chunk:
// the client must see that chunk before the engine sends the rest.
func TestProxyChatStreamIsIncremental(t *testing.T) {
	release := make(chan struct{})
	b := newBackend(t, firstThenWait(release))
	_, front, _ := newGateway(t, nil, b)
	resp := post(t, front.URL, `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "first") {
		t.Fatalf("first event not delivered before the engine finished: %q %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "second") || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("rest of stream missing: %q", rest)
	}
}

// TestProxyChatStreamStatusBeforeFirstEvent holds the engine after its
// status line, before any event: the client must have the status and the
// stream's headers while the engine is still working on its first token.
func TestProxyChatStreamStatusBeforeFirstEvent(t *testing.T) {
	release := make(chan struct{})
	var sent atomic.Bool // the engine is past its wait, sending the event
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		sent.Store(true)
		fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	})
	_, front, _ := newGateway(t, nil, b)
	resp := post(t, front.URL, `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if sent.Load() {
		t.Fatal("the status reached the client only with the engine's first event")
	}
	close(release)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "late") || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream missing its event: %q", rest)
	}
}

func TestRetryBeforeFirstByte(t *testing.T) {
	bad := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
	})
	good := newBackend(t, okChat)
	_, front, _ := newGateway(t, nil, bad, good)
	for i := 0; i < 4; i++ {
		if resp := post(t, front.URL, chatBody); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want the retry to reach the good endpoint", i, resp.StatusCode)
		}
	}
	if bad.hits.Load() == 0 {
		t.Fatal("round-robin never tried the failing endpoint; the test proves nothing")
	}
	if good.hits.Load() != 4 {
		t.Fatalf("good endpoint served %d, want 4", good.hits.Load())
	}
}

func TestNoRetryAfterStreamBegan(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	other := newBackend(t, okChat)
	// With migration off, a stream is never retried once it began (with it
	// on, see TestChatStreamSurvivesADyingReplica).
	_, front, _ := newGatewayWith(t, pools.Options{MaxMigrations: -1}, &affinity.LeastLoaded{}, b, other)
	// Least-loaded with equal load rotates; send until the dying one is hit.
	for i := 0; i < 4 && b.hits.Load() == 0; i++ {
		resp := post(t, front.URL, `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		body, _ := io.ReadAll(resp.Body)
		if b.hits.Load() == 1 {
			s := string(body)
			if !strings.Contains(s, "partial") || !strings.Contains(s, `"upstream_error"`) || strings.Contains(s, "[DONE]") {
				t.Fatalf("a stream broken by the engine must end with an error event and no [DONE]; got %q", s)
			}
			if other.hits.Load() != int64(i) {
				t.Fatal("the request was retried after streaming began")
			}
		}
	}
	if b.hits.Load() == 0 {
		t.Fatal("the dying endpoint was never picked")
	}
}

func TestBreakerOpensOn5xxNotOn400(t *testing.T) {
	var status atomic.Int64
	status.Store(http.StatusBadRequest)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		fmt.Fprint(w, `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","param":null,"code":400}}`)
	})
	_, front, reg := newGateway(t, nil, b)
	ep := reg.Endpoints()[0]
	for i := 0; i < 10; i++ {
		resp := post(t, front.URL, chatBody)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a client error must be relayed as is, got %d", resp.StatusCode)
		}
		// In the OpenAI shape every other error has, with the engine's
		// message: a string code, not the engine's number.
		eb := readAPIError(t, resp)
		if eb.Error.Type != "invalid_request_error" || eb.Error.Code == nil || *eb.Error.Code != "context_length_exceeded" ||
			!strings.Contains(eb.Error.Message, "maximum context length is 8192") {
			t.Fatalf("engine error not normalised: %+v", eb.Error)
		}
	}
	if st := ep.BreakerState(); st != gobreaker.StateClosed {
		t.Fatalf("breaker %v after 400s; a client's 4xx must never open it", st)
	}
	status.Store(http.StatusInternalServerError)
	for i := 0; i < 3; i++ {
		post(t, front.URL, chatBody)
	}
	if st := ep.BreakerState(); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after 3 consecutive 5xx, want open", st)
	}
	resp := post(t, front.URL, chatBody)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("with the only breaker open, want 503, got %d", resp.StatusCode)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	readAPIError(t, resp)
}

func TestBadInput(t *testing.T) {
	b := newBackend(t, okChat)
	_, front, _ := newGateway(t, nil, b)
	tests := []struct {
		name, body string
		status     int
		code       string
		param      string
	}{
		{"malformed json", `{"model":`, 400, "invalid_json", ""},
		{"not an object", `[1,2]`, 400, "invalid_type", ""},
		{"missing model", `{"messages":[{"role":"user","content":"hi"}]}`, 400, "missing_required_parameter", "model"},
		{"model wrong type", `{"model":7,"messages":[]}`, 400, "invalid_type", "model"},
		{"missing messages", `{"model":"test-model"}`, 400, "missing_required_parameter", "messages"},
		{"messages wrong type", `{"model":"test-model","messages":"hi"}`, 400, "invalid_type", "messages"},
		{"max_tokens negative", `{"model":"test-model","max_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, 400, "integer_below_min_value", "max_tokens"},
		{"unknown model", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, "model_not_found", "model"},
		{"too large", `{"model":"test-model","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`, 413, "request_too_large", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, front.URL, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			eb := readAPIError(t, resp)
			if eb.Error.Code == nil || *eb.Error.Code != tt.code {
				t.Errorf("code %v, want %q", eb.Error.Code, tt.code)
			}
			if tt.param != "" && (eb.Error.Param == nil || *eb.Error.Param != tt.param) {
				t.Errorf("param %v, want %q", eb.Error.Param, tt.param)
			}
		})
	}
	if b.hits.Load() != 0 {
		t.Fatalf("bad input reached the engine %d times", b.hits.Load())
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	})
	_, front, reg := newGateway(t, nil, b)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp.Body).ReadString('\n')
	cancel()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the engine request outlived the client")
	}
	deadline := time.Now().Add(2 * time.Second)
	for reg.Endpoints()[0].InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := reg.Endpoints()[0].InFlight(); n != 0 {
		t.Fatalf("in-flight count leaked: %d", n)
	}
}

func TestGracefulShutdownFinishesStream(t *testing.T) {
	release := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n")
	})
	s, _, _ := newGateway(t, nil, b)
	s.opts.Addr = "127.0.0.1:0"
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	url := "http://" + s.Addr()

	resp := post(t, url, `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Close(context.Background()) }()
	// Shutdown closes the listener at once; the stream, held until
	// release, still runs: a new connection is refused before it ends.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Error("new connections still accepted 10s into shutdown")
			break
		}
	}
	close(release)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("in-flight stream cut by shutdown: %q", rest)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-s.Served(); err != nil {
		t.Fatalf("serving ended with %v, not for the shutdown", err)
	}
}

// TestShutdownDeadlineEndsStreamsWithAnError: a stream still running when
// the shutdown deadline passes is ended with an error event that says the
// gateway is shutting down, not cut without a word.
func TestShutdownDeadlineEndsStreamsWithAnError(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // an answer that outlasts the deadline
	})
	s, _, _ := newGateway(t, nil, b)
	s.opts.ShutdownTimeout = time.Millisecond
	s.opts.Addr = "127.0.0.1:0"
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	resp := post(t, "http://"+s.Addr(), `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err == nil {
		t.Error("a shutdown past its deadline reported no error")
	}
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), `"code":"server_shutting_down"`) || strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream at the shutdown deadline ended with %q", rest)
	}
}

func TestModelsAndHealth(t *testing.T) {
	_, front, reg := newGateway(t, nil, newBackend(t, okChat))
	resp, err := http.Get(front.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list.Data) != 1 || list.Data[0].ID != testModel {
		t.Fatalf("models %+v", list)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		resp, _ := http.Get(front.URL + path)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	reg.Endpoints()[0].SetHealthy(false)
	resp, _ = http.Get(front.URL + "/readyz")
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readyz with no healthy endpoint: %d", resp.StatusCode)
	}
	if r := post(t, front.URL, chatBody); r.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("chat with no healthy endpoint: %d, want 503", r.StatusCode)
	}
}

func TestMetricsExposed(t *testing.T) {
	_, front, _ := newGateway(t, nil, newBackend(t, okChat))
	post(t, front.URL, chatBody)
	io.ReadAll(post(t, front.URL, `{"model":"test-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`).Body)
	resp, err := http.Get(front.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{
		`turnpike_requests_total{code="200",route="/v1/chat/completions"} 2`,
		`turnpike_time_to_first_token_seconds_count{route="/v1/chat/completions"} 1`,
		"turnpike_request_duration_seconds_bucket",
		"turnpike_endpoint_in_flight_requests",
		`turnpike_engine_connections_total{kind="reused"}`,
		"turnpike_endpoint_breaker_state",
	} {
		if !strings.Contains(string(b), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// TestWithStreamUsage: the engine is asked for usage whether the client
// sent no stream_options (spliced in) or its own without include_usage
// (merged), and the rest of the body is kept.
func TestWithStreamUsage(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		options    bool
	}{
		{"absent", `{"model":"m","stream":true,"messages":[]}`, false},
		{"own, false", `{"model":"m","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true},"messages":[]}`, true},
		{"own, without it", `{"model":"m","stream":true,"stream_options":{},"messages":[]}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The member goes into the room before the body, whatever space
			// leads it: the same body each time, and the bytes after the
			// opening brace, which the parsed request reads, stay where
			// they were, unchanged.
			var out []byte
			var ok bool
			for _, lead := range []string{"", " \n\t", strings.Repeat(" ", 2*bodyHeadroom)} {
				room := append(bytes.Repeat([]byte{'x'}, bodyHeadroom), lead+tc.body...)
				tail := bytes.Clone(room[bodyHeadroom+len(lead)+1:])
				in, inOK := withStreamUsage(room, tc.options)
				if lead == "" {
					out, ok = in, inOK
				} else if inOK != ok || string(bytes.TrimLeft(in, " \n\t")) != string(out) {
					t.Fatalf("lead %q: %q, %v; without it %q, %v", lead, in, inOK, out, ok)
				}
				if !tc.options && (!bytes.Equal(room[bodyHeadroom+len(lead)+1:], tail) || &in[len(in)-1] != &room[len(room)-1]) {
					t.Fatalf("lead %q: the body after its brace moved or changed", lead)
				}
			}
			var got struct {
				Model         string                     `json:"model"`
				Messages      []any                      `json:"messages"`
				StreamOptions map[string]json.RawMessage `json:"stream_options"`
			}
			if !ok || json.Unmarshal(out, &got) != nil {
				t.Fatalf("not usable: %q, %v", out, ok)
			}
			if string(got.StreamOptions["include_usage"]) != "true" || got.Model != "m" || got.Messages == nil {
				t.Fatalf("body %s", out)
			}
			if tc.name == "own, false" && string(got.StreamOptions["continuous_usage_stats"]) != "true" {
				t.Errorf("the client's other stream options were lost: %s", out)
			}
		})
	}
}
