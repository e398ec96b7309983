package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/bench/driver"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// fakeGateway is a tiny OpenAI-compatible server: just enough streaming
// /v1/responses and /v1/chat/completions for the runner, plus an engine
// /metrics whose prefix-cache counters follow the usage it reports.
type fakeGateway struct {
	srv *httptest.Server
	// tokenGap is the pause between streamed deltas.
	tokenGap time.Duration
	// shedBand answers requests of this priority with 429, and with
	// shedRetryAfter as its Retry-After when set.
	shedBand       string
	shedRetryAfter string
	// holdChained, when set, receives every Responses request chained to
	// an earlier response, which then gets no answer until the client
	// goes away: a test's way to stop a run at a known point.
	holdChained chan fakeRequest
	// abortEvery > 0 breaks the connection of every abortEvery-th stream
	// after two deltas, as a gateway whose stream could not go on would.
	abortEvery int

	mu struct {
		sync.Mutex
		nextID int
		// parent maps a response id to the previous_response_id it chained to.
		parent map[string]string
		// tokens maps a response id to its conversation's tokens so far.
		tokens   map[string]int
		requests []fakeRequest
		queries  int
		hits     int
		streams  int
	}
}

// fakeRequest is what the fake saw of one request.
type fakeRequest struct {
	Path       string
	Auth       string
	Priority   string
	Session    string
	PreviousID string
	Items      int
	MaxTokens  int
	IgnoreEOS  bool
}

func newFakeGateway(t *testing.T) *fakeGateway {
	t.Helper()
	f := &fakeGateway{tokenGap: time.Millisecond}
	f.mu.parent = map[string]string{}
	f.mu.tokens = map[string]int{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", f.responses)
	mux.HandleFunc("POST /v1/chat/completions", f.chat)
	mux.HandleFunc("GET /metrics", f.metrics)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeGateway) target() driver.Target {
	return driver.Target{BaseURL: f.srv.URL, APIKey: "key-default", EngineMetricsURLs: []string{f.srv.URL + "/metrics"}}
}

func (f *fakeGateway) requests() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.mu.requests...)
}

// textTokens counts tokens the way the generated text is built: 4 bytes each.
func textTokens(s string) int { return (len(s) + workload.BytesPerToken - 1) / workload.BytesPerToken }

func (f *fakeGateway) shed(w http.ResponseWriter, r *http.Request) bool {
	if f.shedBand == "" || r.Header.Get(driver.HeaderPriority) != f.shedBand {
		return false
	}
	w.Header().Set(driver.HeaderDroppedReason, "saturated")
	if f.shedRetryAfter != "" {
		w.Header().Set("Retry-After", f.shedRetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	fmt.Fprint(w, `{"error":{"message":"shed","type":"rate_limit_error","param":null,"code":"shed"}}`)
	return true
}

func (f *fakeGateway) responses(w http.ResponseWriter, r *http.Request) {
	var body struct {
		PreviousResponseID string            `json:"previous_response_id"`
		MaxOutputTokens    int               `json:"max_output_tokens"`
		Input              []json.RawMessage `json:"input"`
		Stream             bool              `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !body.Stream {
		http.Error(w, `{"error":{"message":"bad body"}}`, http.StatusBadRequest)
		return
	}
	req := fakeRequest{Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Priority: r.Header.Get(driver.HeaderPriority),
		Session: r.Header.Get(driver.HeaderSessionID), PreviousID: body.PreviousResponseID, Items: len(body.Input), MaxTokens: body.MaxOutputTokens}
	if f.shed(w, r) {
		f.record(req, 0, 0)
		return
	}
	newTokens := 0
	for _, it := range body.Input {
		newTokens += textTokens(string(it))
	}
	f.mu.Lock()
	if _, ok := f.mu.tokens[body.PreviousResponseID]; body.PreviousResponseID != "" && !ok {
		f.mu.Unlock()
		http.Error(w, `{"error":{"message":"unknown previous_response_id"}}`, http.StatusNotFound)
		return
	}
	cached := f.mu.tokens[body.PreviousResponseID]
	f.mu.nextID++
	id := fmt.Sprintf("resp_%d", f.mu.nextID)
	f.mu.parent[id] = body.PreviousResponseID
	f.mu.tokens[id] = cached + newTokens + body.MaxOutputTokens
	f.mu.Unlock()
	f.record(req, cached+newTokens, cached)
	if f.holdChained != nil && body.PreviousResponseID != "" {
		f.holdChained <- req
		<-r.Context().Done()
		return
	}

	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	event := func(typ string, v map[string]any) {
		v["type"] = typ
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
		fl.Flush()
	}
	event("response.created", map[string]any{"sequence_number": 0, "response": map[string]any{"id": id, "object": "response", "status": "in_progress"}})
	abort := f.aborts()
	for i := range body.MaxOutputTokens {
		if abort && i == 2 {
			panic(http.ErrAbortHandler)
		}
		time.Sleep(f.tokenGap)
		event("response.output_text.delta", map[string]any{"sequence_number": i + 1, "item_id": "msg_" + id, "output_index": 0, "content_index": 0, "delta": "tok "})
	}
	event("response.completed", map[string]any{"sequence_number": body.MaxOutputTokens + 1, "response": map[string]any{
		"id": id, "object": "response", "status": "completed",
		"usage": map[string]any{
			"input_tokens": cached + newTokens, "input_tokens_details": map[string]any{"cached_tokens": cached},
			"output_tokens": body.MaxOutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": cached + newTokens + body.MaxOutputTokens,
		},
	}})
}

func (f *fakeGateway) chat(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages      []json.RawMessage `json:"messages"`
		MaxTokens     int               `json:"max_tokens"`
		IgnoreEOS     bool              `json:"ignore_eos"`
		Stream        bool              `json:"stream"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !body.Stream {
		http.Error(w, `{"error":{"message":"bad body"}}`, http.StatusBadRequest)
		return
	}
	req := fakeRequest{Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Priority: r.Header.Get(driver.HeaderPriority),
		Session: r.Header.Get(driver.HeaderSessionID), Items: len(body.Messages), MaxTokens: body.MaxTokens, IgnoreEOS: body.IgnoreEOS}
	if f.shed(w, r) {
		f.record(req, 0, 0)
		return
	}
	// The fake "caches" every message but the last two.
	input, cached := 0, 0
	for i, m := range body.Messages {
		n := textTokens(string(m))
		input += n
		if i < len(body.Messages)-2 {
			cached += n
		}
	}
	f.record(req, input, cached)
	f.mu.Lock()
	f.mu.nextID++
	id := fmt.Sprintf("chatcmpl-%d", f.mu.nextID)
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	chunk := func(v map[string]any) {
		v["id"], v["object"], v["created"], v["model"] = id, "chat.completion.chunk", 1, "m"
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	abort := f.aborts()
	for i := range body.MaxTokens {
		if abort && i == 2 {
			panic(http.ErrAbortHandler)
		}
		time.Sleep(f.tokenGap)
		c := map[string]any{"index": 0, "delta": map[string]any{"content": "tok "}}
		if i == body.MaxTokens-1 {
			c["finish_reason"] = "length"
		}
		chunk(map[string]any{"choices": []any{c}})
	}
	if body.StreamOptions.IncludeUsage {
		chunk(map[string]any{"choices": []any{}, "usage": map[string]any{
			"prompt_tokens": input, "completion_tokens": body.MaxTokens, "total_tokens": input + body.MaxTokens,
			"prompt_tokens_details": map[string]any{"cached_tokens": cached},
		}})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	fl.Flush()
}

// aborts reports whether the stream about to start is one abortEvery
// breaks.
func (f *fakeGateway) aborts() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.streams++
	return f.abortEvery > 0 && f.mu.streams%f.abortEvery == 0
}

func (f *fakeGateway) record(req fakeRequest, queries, hits int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.requests = append(f.mu.requests, req)
	f.mu.queries += queries
	f.mu.hits += hits
}

func (f *fakeGateway) metrics(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	q, h, n := f.mu.queries, f.mu.hits, len(f.mu.requests)
	f.mu.Unlock()
	var b strings.Builder
	b.WriteString("# HELP vllm:prefix_cache_queries Prefix cache queries, in tokens.\n# TYPE vllm:prefix_cache_queries counter\n")
	fmt.Fprintf(&b, "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} %d\n", q)
	b.WriteString("# HELP vllm:prefix_cache_hits Prefix cache hits, in tokens.\n# TYPE vllm:prefix_cache_hits counter\n")
	fmt.Fprintf(&b, "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} %d\n", h)
	// The gateway's counters, as if it had resumed one stream and retried
	// twice for every request.
	b.WriteString("# TYPE turnpike_stream_migrations_total counter\n")
	fmt.Fprintf(&b, "turnpike_stream_migrations_total{result=\"resumed\"} %d\nturnpike_stream_migrations_total{result=\"failed\"} 0\n", n)
	fmt.Fprintf(&b, "# TYPE turnpike_upstream_retries_total counter\nturnpike_upstream_retries_total %d\n", 2*n)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprint(w, b.String())
}
