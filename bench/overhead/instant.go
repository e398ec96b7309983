package overhead

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/turnpike-gateway/turnpike/accelerators/enginemetrics"
	"github.com/turnpike-gateway/turnpike/bench/workload"
)

// Defaults of InstantConfig.
const (
	DefaultInstantModel        = "bench-model"
	DefaultInstantOutputTokens = 16
	// DefaultInstantNumGPUBlocks is the KV capacity the instant engine
	// reports: large enough that the gateway's KV index never evicts in a
	// run, as 16-token blocks of an idle 80 GB accelerator would hold.
	DefaultInstantNumGPUBlocks = 1 << 20
)

// InstantConfig configures an InstantEngine. Zero fields take the defaults.
type InstantConfig struct {
	// Model is the served model name, in /v1/models and every answer.
	// Default "bench-model".
	Model string
	// OutputTokens is the length of every answer, in tokens; a streamed
	// answer sends one content event per token, flushed. Default 16.
	OutputTokens int
	// NumGPUBlocks is the KV capacity in 16-token blocks that /metrics
	// reports (vllm:cache_config_info). Default 1<<20.
	NumGPUBlocks int
}

// InstantEngine is an OpenAI-compatible engine that answers at once, for
// measuring what sits in front of it: POST /v1/chat/completions (streamed
// or not, with usage), GET /v1/models, /health and /metrics under vLLM's
// metric names, so that a gateway's scraper and health checks see a
// healthy, idle vLLM.
//
// It must cost less than the proxies it is measured through, so it reads
// a body into a pooled buffer and parses none of it: whether to stream is
// a byte search for the key (see wantsStream), the prompt's token count is
// its size over BytesPerToken, and the answers are built once. Safe for
// concurrent use.
type InstantEngine struct {
	cfg InstantConfig
	// answer is the non-streamed body around its usage numbers.
	answerHead, answerTail []byte
	// events are the streamed content events and the finish event;
	// usageHead and usageTail wrap the usage event's numbers.
	events               [][]byte
	usageHead, usageTail []byte
	bufs                 sync.Pool

	running, requests         atomic.Int64
	promptTokens, generatedTk atomic.Int64
}

// NewInstantEngine returns an engine for cfg.
func NewInstantEngine(cfg InstantConfig) *InstantEngine {
	if cfg.Model == "" {
		cfg.Model = DefaultInstantModel
	}
	if cfg.OutputTokens <= 0 {
		cfg.OutputTokens = DefaultInstantOutputTokens
	}
	if cfg.NumGPUBlocks <= 0 {
		cfg.NumGPUBlocks = DefaultInstantNumGPUBlocks
	}
	e := &InstantEngine{cfg: cfg}
	e.bufs.New = func() any { return new(bytes.Buffer) }
	model := strconv.Quote(cfg.Model)
	text := workload.UserText(cfg.OutputTokens, 0x1257a47)
	e.answerHead = fmt.Appendf(nil, `{"id":"chatcmpl-instant","object":"chat.completion","created":0,"model":%s,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":`, model, text)
	e.answerTail = []byte("}}")
	chunk := `data: {"id":"chatcmpl-instant","object":"chat.completion.chunk","created":0,"model":` + model + `,"choices":[`
	e.events = append(e.events, []byte(chunk+`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`+"\n\n"))
	for i := range cfg.OutputTokens {
		tok := workload.UserText(1, 0x1257a47, uint64(i)) + " "
		e.events = append(e.events, fmt.Appendf(nil, chunk+`{"index":0,"delta":{"content":%q},"finish_reason":null}]}`+"\n\n", tok))
	}
	e.events = append(e.events, []byte(chunk+`{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"))
	e.usageHead = []byte(chunk + `],"usage":{"prompt_tokens":`)
	e.usageTail = []byte("}}\n\ndata: [DONE]\n\n")
	return e
}

// ServeHTTP answers the engine's routes.
func (e *InstantEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/chat/completions":
		if r.Method != http.MethodPost {
			http.Error(w, `{"error":{"message":"POST only","type":"invalid_request_error"}}`, http.StatusMethodNotAllowed)
			return
		}
		e.chat(w, r)
	case "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","created":0,"owned_by":"turnpike-bench"}]}`, e.cfg.Model)
	case "/health":
	case "/metrics":
		e.metrics(w)
	default:
		http.NotFound(w, r)
	}
}

func (e *InstantEngine) chat(w http.ResponseWriter, r *http.Request) {
	e.running.Add(1)
	defer e.running.Add(-1)
	buf := e.bufs.Get().(*bytes.Buffer)
	defer e.bufs.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return
	}
	body := buf.Bytes()
	prompt := int64(len(body) / workload.BytesPerToken)
	out := int64(e.cfg.OutputTokens)
	e.requests.Add(1)
	e.promptTokens.Add(prompt)
	e.generatedTk.Add(out)

	// The body is read; its buffer now holds the answer.
	ans := buf.AvailableBuffer()
	if !wantsStream(body) {
		ans = append(ans, e.answerHead...)
		ans = appendUsage(ans, prompt, out)
		ans = append(ans, e.answerTail...)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(ans)))
		w.Write(ans)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	for _, ev := range e.events {
		if _, err := w.Write(ev); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
	ans = append(ans, e.usageHead...)
	ans = appendUsage(ans, prompt, out)
	ans = append(ans, e.usageTail...)
	w.Write(ans)
}

// appendUsage appends the numbers of an OpenAI usage object after its
// "prompt_tokens": key.
func appendUsage(b []byte, prompt, out int64) []byte {
	b = strconv.AppendInt(b, prompt, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, out, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, prompt+out, 10)
	return append(b, `,"prompt_tokens_details":{"cached_tokens":0}`...)
}

var streamKey = []byte(`"stream"`)

// wantsStream reports whether body has a "stream" key set to true, by a
// byte search rather than a parse. Inside a JSON string a quote is
// escaped, so an unescaped "stream" followed by a colon is a key; it is
// taken as the request's when its value is true. A tool schema with a
// nested "stream": true key would fool it; the load generator sends none.
func wantsStream(body []byte) bool {
	for i := 0; ; {
		j := bytes.Index(body[i:], streamKey)
		if j < 0 {
			return false
		}
		i += j + len(streamKey)
		if i-len(streamKey) > 0 && body[i-len(streamKey)-1] == '\\' {
			continue
		}
		k := skipSpace(body, i)
		if k >= len(body) || body[k] != ':' {
			continue
		}
		k = skipSpace(body, k+1)
		if bytes.HasPrefix(body[k:], []byte("true")) {
			return true
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// metrics writes the exposition a vLLM engine would, with the counters
// of what this engine answered. Scraped a few times a second: not a hot path.
func (e *InstantEngine) metrics(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	m := strconv.Quote(e.cfg.Model)
	req := e.requests.Load()
	series := func(name, typ string, v int64) {
		fmt.Fprintf(w, "# TYPE %[1]s %[2]s\n%[1]s{%[3]s=%[4]s} %[5]d\n", name, typ, enginemetrics.LabelModelName, m, v)
	}
	series(enginemetrics.VLLMNumRequestsRunning, "gauge", e.running.Load())
	series(enginemetrics.VLLMNumRequestsWaiting, "gauge", 0)
	series(enginemetrics.VLLMKVCacheUsagePerc, "gauge", 0)
	fmt.Fprintf(w, "# TYPE %[1]s gauge\n%[1]s{%[2]s=\"16\",%[3]s=\"%[4]d\"} 1\n",
		enginemetrics.VLLMCacheConfigInfo, enginemetrics.LabelBlockSize, enginemetrics.LabelNumGPUBlocks, e.cfg.NumGPUBlocks)
	series(enginemetrics.VLLMPrefixCacheQueries, "counter", e.promptTokens.Load())
	series(enginemetrics.VLLMPrefixCacheHits, "counter", 0)
	series(enginemetrics.VLLMPromptTokens, "counter", e.promptTokens.Load())
	series(enginemetrics.VLLMGenerationTokens, "counter", e.generatedTk.Load())
	series(enginemetrics.VLLMRequestSuccess, "counter", req)
}

var _ http.Handler = (*InstantEngine)(nil)
