package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 32 << 20

// Handler is the engine's HTTP API, vLLM's where a router can see it:
//
//	POST /v1/chat/completions   OpenAI chat, streamed or not, with tools
//	                            and response_format
//	POST /v1/completions        OpenAI completions, streamed or not
//	GET  /v1/models             the served model, with max_model_len, and
//	                            the loaded LoRA adapters (parent: the model)
//	POST /v1/load_lora_adapter  vLLM's {"lora_name","lora_path"}: load an
//	                            adapter into a slot (Config.MaxLoRAs)
//	POST /v1/unload_lora_adapter  vLLM's {"lora_name"}
//	GET  /health                200, or 503 after SetHealthy(false)
//	POST /tokenize              vLLM's {"model","prompt"|"messages"}
//	GET  /metrics               Prometheus text, this engine's registry
//	POST /reset_prefix_cache    ResetPrefixCache
//	POST /kv_transfer/pull      a decode engine claims a prefilled
//	                            request's KV blocks (see KVTransferParams)
//	POST /bootstrap/room        SGLang flavour: a decode engine claims a
//	                            bootstrap room's KV (see Bootstrap)
func (e *Engine) Handler() http.Handler { return e.handler }

func (e *Engine) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", e.handleChat)
	mux.HandleFunc("POST /v1/completions", e.handleCompletion)
	mux.HandleFunc("GET /v1/models", e.handleModels)
	mux.HandleFunc("GET /health", e.handleHealth)
	mux.HandleFunc("POST /tokenize", e.handleTokenize)
	mux.HandleFunc("POST "+LoadLoRAPath, e.handleLoadLoRA)
	mux.HandleFunc("POST "+UnloadLoRAPath, e.handleUnloadLoRA)
	mux.HandleFunc("POST "+PullPath, e.handlePull)
	mux.HandleFunc("POST "+BootstrapPath, e.handleBootstrap)
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /reset_prefix_cache", func(w http.ResponseWriter, r *http.Request) {
		if err := e.ResetPrefixCache(r.Context()); err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error(), "")
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	return mux
}

// genRequest is what the chat and completion endpoints have in common once
// decoded.
type genRequest struct {
	chat         bool
	model        string
	prompt       string
	maxTokens    *int
	ignoreEOS    bool
	stream       bool
	includeUsage bool
	tool         *toolSpec
	// format asks for JSON; nil for text.
	format *responseFormat
	// planPrompt, when set, is the prompt the answer is planned from, and
	// continued the part of that answer already given: a continued final
	// message carries on the answer its conversation would have had.
	planPrompt, continued string
	// kv disaggregates prefill and decode; nil for a whole request.
	kv *KVTransferParams
	// bootstrap disaggregates them as SGLang does (see Bootstrap).
	bootstrap BootstrapFields
	// priority orders the request under the priority scheduling policy.
	priority int
}

func (e *Engine) handleChat(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, err := DecodeChatRequest(body)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	tool, err := chooseTool(req)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	maxTokens := req.MaxCompletionTokens
	if maxTokens == nil {
		maxTokens = req.MaxTokens
	}
	addGen := req.ContinueFinalMessage || req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	rendered, err := e.renderChat(req.Messages, req.Tools, addGen)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	g := genRequest{
		chat:         true,
		model:        req.Model,
		prompt:       rendered,
		maxTokens:    maxTokens,
		ignoreEOS:    req.IgnoreEOS,
		stream:       req.Stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		tool:         tool,
		format:       req.format,
		kv:           req.KVTransferParams,
		bootstrap:    req.BootstrapFields,
		priority:     req.Priority,
	}
	switch {
	case req.ContinueFinalMessage:
		// The final message is the start of the answer: rendered open,
		// after the generation prompt of the conversation before it.
		n := len(req.Messages)
		if g.planPrompt, err = e.renderChat(req.Messages[:n-1], req.Tools, true); err != nil {
			writeRequestError(w, err)
			return
		}
		g.continued = req.Messages[n-1].Content.Text()
		g.prompt = g.planPrompt + g.continued
		if g.tool != nil && len(req.Messages[n-1].ToolCalls) == 0 {
			g.tool = nil // continuing text, not a call
		}
	}
	e.generate(w, r, g)
}

func (e *Engine) handleCompletion(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, prompt, err := DecodeCompletionRequest(body)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	e.generate(w, r, genRequest{
		model:        req.Model,
		prompt:       prompt,
		maxTokens:    req.MaxTokens,
		ignoreEOS:    req.IgnoreEOS,
		stream:       req.Stream,
		includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		kv:           req.KVTransferParams,
		bootstrap:    req.BootstrapFields,
		priority:     req.Priority,
	})
}

// generate runs one request through faults, validation and the engine,
// and writes its answer. The handler owns the sequence until submit, then
// shares it with the engine loop; if the client leaves first, the handler
// marks it cancelled and the loop frees it at its next step.
func (e *Engine) generate(w http.ResponseWriter, r *http.Request, g genRequest) {
	ctx := r.Context()
	f, err := e.drawFault(r.Header.Get(FaultHeader))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	if f.latency > 0 {
		t := time.NewTimer(f.latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	if f.hang {
		<-ctx.Done()
		return
	}
	if f.status != 0 {
		writeError(w, f.status, fmt.Sprintf("injected fault: status %d", f.status), "")
		return
	}
	adapter, ok := e.modelOK(w, g.model)
	if !ok {
		return
	}
	if g.priority != 0 && e.cfg.SchedulingPolicy != SchedulingPriority {
		// As vLLM answers a priority it would not honour.
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Got priority %d but priority scheduling is not enabled.", g.priority), "priority")
		return
	}
	promptTokens := CountTokens(g.prompt)
	var ids []uint32
	if tok := e.cfg.Tokenizer; tok != nil {
		ids = tok.Encode(make([]uint32, 0, len(g.prompt)/3+64), g.prompt)
		promptTokens = len(ids)
	}
	maxTokens, err := e.maxTokens(promptTokens, g.maxTokens)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	room, err := e.bootstrapFor(&g)
	if err != nil {
		writeRequestError(w, err)
		return
	}
	if room != nil && e.cfg.Role == RolePrefill {
		// An SGLang prefill server answers the first token; the decode
		// server gives the answer.
		maxTokens = 1
	}
	out := e.plan(&g, maxTokens)
	if need := ceilDiv(promptTokens+out.tokens, e.cfg.BlockSize); need > e.numBlocks {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(
			"request needs %d KV cache blocks (%d prompt + %d output tokens) but the engine has %d blocks of %d tokens",
			need, promptTokens, out.tokens, e.numBlocks, e.cfg.BlockSize), "messages")
		return
	}
	if err := e.kvRole(g.kv, g.stream); err != nil {
		writeRequestError(w, err)
		return
	}
	var loraID int64
	if adapter != "" {
		id, _, err := e.lora.acquire(ctx, adapter, e.cfg.RuntimeLoRALoading)
		switch {
		case errors.Is(err, errLoRANotFound):
			writeModelNotFound(w, g.model)
			return
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, err.Error(), "")
			return
		}
		defer e.lora.release(adapter)
		loraID = id
	}
	var q *sequence
	if ids != nil {
		q = newExactSequence(e.nextID.Add(1), g.prompt, ids, out)
	} else {
		q = newSequence(e.nextID.Add(1), g.prompt, out)
	}
	q.priority = g.priority
	q.adapter, q.loraID = adapter, loraID
	a := answer{e: e, g: &g, q: q, created: time.Now().Unix()}
	a.id = e.responseID(g.chat, q.id)
	if kv := g.kv; kv != nil && (kv.DoRemoteDecode || kv.DoRemotePrefill) {
		q.promptHash = promptHash(g.prompt)
		if kv.DoRemoteDecode {
			q.leaseID = a.id
		} else {
			if err := e.pull(ctx, kv, q.promptHash); err != nil {
				writeRequestError(w, errKVTransfer(*kv.RemoteRequestID, err))
				return
			}
			q.remote = promptTokens - 1
		}
	}
	if room != nil {
		if err := e.bootstrapLeg(ctx, room, q, g.prompt, promptTokens); err != nil {
			writeRequestError(w, err)
			return
		}
	}
	if err := e.submit(q); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error(), "")
		return
	}
	defer func() {
		if !q.done.Load() {
			q.cancelled.Store(true)
		}
	}()
	if g.stream {
		a.stream(w, ctx, f.dropAfter)
		return
	}
	if !a.wait(ctx, nil) {
		return
	}
	if q.err != nil {
		writeError(w, http.StatusServiceUnavailable, q.err.Error(), "")
		return
	}
	if f.dropAfter >= 0 {
		panic(http.ErrAbortHandler)
	}
	var params *KVTransferParams
	if q.leaseID != "" && room == nil {
		params = e.answerParams(r, q)
	}
	writeJSON(w, http.StatusOK, a.whole(params))
}

// maxTokens resolves the output cap and checks it against max_model_len,
// with vLLM's messages.
func (e *Engine) maxTokens(promptTokens int, asked *int) (int, error) {
	if asked == nil {
		room := e.maxModelLen - promptTokens
		if room < 1 {
			return 0, &paramError{param: "messages", msg: fmt.Sprintf(
				"This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.",
				e.maxModelLen, promptTokens)}
		}
		return min(e.cfg.DefaultMaxTokens, room), nil
	}
	if *asked < 1 {
		return 0, &paramError{param: "max_tokens", msg: fmt.Sprintf("max_tokens must be at least 1, got %d.", *asked)}
	}
	if promptTokens+*asked > e.maxModelLen {
		return 0, &paramError{param: "max_tokens", msg: fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			e.maxModelLen, promptTokens+*asked, promptTokens, *asked)}
	}
	return *asked, nil
}

// modelOK checks the request's model: the served model (or none), or a
// LoRA adapter of it, which it returns. Anything else is answered 404.
func (e *Engine) modelOK(w http.ResponseWriter, model string) (adapter string, ok bool) {
	if model == "" || model == e.cfg.ServedModelName {
		return "", true
	}
	if e.lora.isAdapter(model) {
		return model, true
	}
	writeModelNotFound(w, model)
	return "", false
}

func writeModelNotFound(w http.ResponseWriter, model string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", model), "model")
}

func (e *Engine) responseID(chat bool, id uint64) string {
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	return prefix + e.cfg.Name + "-" + strconv.FormatUint(id, 10)
}

func (e *Engine) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: append([]modelCard{{
		ID:          e.cfg.ServedModelName,
		Object:      "model",
		Created:     e.created,
		OwnedBy:     e.cfg.Flavor,
		Root:        e.cfg.Model,
		MaxModelLen: e.maxModelLen,
	}}, e.adapterCards()...)})
}

func (e *Engine) handleHealth(w http.ResponseWriter, r *http.Request) {
	if !e.healthy.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (e *Engine) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req TokenizeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error(), "")
		return
	}
	if _, ok := e.modelOK(w, req.Model); !ok {
		return
	}
	var text string
	switch {
	case req.Prompt != nil:
		text = *req.Prompt
	case len(req.Messages) > 0:
		var err error
		if text, err = e.renderChat(req.Messages, req.Tools, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt); err != nil {
			writeRequestError(w, err)
			return
		}
	default:
		writeError(w, http.StatusBadRequest, "either prompt or messages is required", "prompt")
		return
	}
	var toks []uint32
	if tok := e.cfg.Tokenizer; tok != nil {
		toks = tok.Encode(nil, text)
	} else {
		toks = Tokenize(text)
	}
	writeJSON(w, http.StatusOK, TokenizeResponse{Count: len(toks), MaxModelLen: e.maxModelLen, Tokens: toks})
}

// renderChat renders a chat prompt with the engine's chat template:
// Config.Tokenizer's, or RenderChat, whose generation prompt is the final
// marker.
func (e *Engine) renderChat(messages []ChatMessage, tools json.RawMessage, addGenerationPrompt bool) (string, error) {
	if tok := e.cfg.Tokenizer; tok != nil {
		text, err := tok.RenderChat(messages, tools, addGenerationPrompt)
		if err != nil {
			return "", &paramError{param: "messages", msg: "the chat template refused the messages: " + err.Error()}
		}
		return text, nil
	}
	text := RenderChat(messages, tools)
	if !addGenerationPrompt {
		text = strings.TrimSuffix(text, assistantTurn)
	}
	return text, nil
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		status := http.StatusBadRequest
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			status = http.StatusRequestEntityTooLarge
		}
		writeError(w, status, "could not read body: "+err.Error(), "")
		return nil, false
	}
	return body, true
}

// writeRequestError answers a request the simulator refuses with 400.
func writeRequestError(w http.ResponseWriter, err error) {
	var pe *paramError
	if errors.As(err, &pe) {
		writeError(w, http.StatusBadRequest, pe.msg, pe.param)
		return
	}
	writeError(w, http.StatusBadRequest, err.Error(), "")
}

// errorTypes are vLLM's error type names by status.
var errorTypes = map[int]string{
	http.StatusBadRequest:            "BadRequestError",
	http.StatusNotFound:              "NotFoundError",
	http.StatusRequestEntityTooLarge: "BadRequestError",
	http.StatusTooManyRequests:       "RateLimitError",
	http.StatusInternalServerError:   "InternalServerError",
	http.StatusServiceUnavailable:    "ServiceUnavailableError",
}

// writeError writes the OpenAI error shape, {"error":{message,type,param,
// code}}, with code the HTTP status as vLLM writes it.
func writeError(w http.ResponseWriter, status int, msg, param string) {
	var b errorBody
	b.Error.Message = msg
	b.Error.Type = errorTypes[status]
	if b.Error.Type == "" {
		b.Error.Type = "APIError"
	}
	if param != "" {
		b.Error.Param = &param
	}
	b.Error.Code = status
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sim: marshal %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// seed is the random stream of the answer to prompt.
func (e *Engine) seed(prompt string) uint64 {
	return xxhash.Sum64String(prompt) ^ (e.cfg.Seed * 0x9e3779b97f4a7c15)
}

// plan decides the whole output of a request from its prompt: a tool
// call, JSON for a response_format, or text; the rest of a continued
// answer; a reasoning model's thinking first.
func (e *Engine) plan(g *genRequest, maxTokens int) output {
	// The default cap of a request that set none, where the context left
	// is longer, is no limit the client asked for.
	soft := g.maxTokens == nil && maxTokens == e.cfg.DefaultMaxTokens
	answer := func(seed uint64, maxTokens int) output {
		switch {
		case g.tool != nil:
			return planToolCall(seed, g.tool, maxTokens)
		case g.format != nil:
			return planJSON(seed, g.format, maxTokens)
		}
		return planText(seed, maxTokens, g.ignoreEOS, soft)
	}
	seed := e.seed(g.prompt)
	switch {
	case g.planPrompt != "" && g.tool == nil:
		return e.planContinued(g, maxTokens, answer)
	case e.cfg.Reasoning && g.chat && g.planPrompt == "":
		// A continued answer is past its thinking.
		return withThoughts(seed, maxTokens, func(n int) output { return answer(seed, n) })
	}
	return answer(seed, maxTokens)
}

// planContinued plans the rest of an answer whose start (g.continued) was
// given as the final message: the answer the conversation before it gets,
// less the part already given, within maxTokens more. A start that is not
// that answer's is continued with a fresh one.
func (e *Engine) planContinued(g *genRequest, maxTokens int, plan func(seed uint64, maxTokens int) output) output {
	given := CountTokens(g.continued)
	whole := plan(e.seed(g.planPrompt), maxTokens+given)
	if given > 0 && len(g.continued) == given*TokenBytes && strings.HasPrefix(whole.text, g.continued) {
		whole.text = whole.text[len(g.continued):]
		whole.tokens -= given
		return whole
	}
	return plan(e.seed(g.prompt), maxTokens)
}
