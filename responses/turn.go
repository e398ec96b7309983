package responses

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/responses/wire"
	"github.com/turnpike-gateway/turnpike/tracing"
	"go.opentelemetry.io/otel/trace"
)

// turn is a response being made: the request, its record, and the engine
// request rebuilt from its context.
type turn struct {
	req *wire.CreateRequest
	rec *Record
	// base is the context the response continues (its previous
	// response's), nil for a new chain or a conversation.
	base   []Segment
	input  []wire.Item
	body   []byte
	prompt *prompt.Prompt
	// promptTokens is the prompt's token count, computed once, when the
	// context window was checked; 0 leaves the count to dispatch.
	promptTokens int
	// tokens are the prompt's ids when the model's tokenizer renders
	// prompts itself and encoded it for the count (countPrompt); nil
	// leaves the encoding to dispatch.
	tokens []uint32
	// tokenBuf is the pooled buffer behind tokens (release).
	tokenBuf *[]uint32
	// aside: the turn is not of its chain's own (a compaction summary),
	// so its prompt is not remembered as the chain's last.
	aside bool
	// items is the context the engine request was rendered from (before
	// fitting it to the window); pre the items that start the output
	// before the engine's answer (a compaction item).
	items, pre []wire.Item
	// history is the context as stored, not compacted: the items of base
	// (the first nbase, their strings baseStrs bytes), then the input.
	// The turn owns it; once the response is stored it becomes the
	// response's entry in the context cache.
	history  []wire.Item
	nbase    int
	baseStrs int64
	// prefix is the messages of base as the context cache rendered them,
	// until a rendering of history takes it; next the messages of that
	// rendering, for the response's entry (render).
	prefix, next *renderedPrefix
	// conversation or chainRoot names the session for routing: the
	// conversation, or the session of the chain the response continues;
	// newChain is the response's own id when it starts a chain, the
	// session's name when nothing in the request names one.
	conversation, chainRoot, newChain string
	// hdr is the client's request header, read for the session and
	// priority hints; nil when there is none (a recovered job).
	hdr http.Header
}

// prepare checks the request against the store and builds the turn:
// the response object, the whole context and the engine request.
func (s *Service) prepare(ctx context.Context, tenant string, req *wire.CreateRequest, hdr http.Header, id string, created int64) (*turn, error) {
	lctx, span := s.cfg.Tracer.Start(ctx, tracing.SpanStateLoad, trace.SpanKindInternal)
	t, items, err := s.load(lctx, tenant, req, hdr, id, created)
	tracing.Fail(span, err)
	span.End()
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, wire.Invalidf("input", "empty_array", "Invalid 'input': empty array. Expected at least one input item, or a previous_response_id or conversation that holds some.")
	}
	t.items = items
	if err := s.fit(t, items); err != nil {
		return nil, err
	}
	return t, nil
}

// load checks the request against the store and builds the turn with its
// whole context, compacted, which the engine request is yet to be
// rendered from.
func (s *Service) load(ctx context.Context, tenant string, req *wire.CreateRequest, hdr http.Header, id string, created int64) (*turn, []wire.Item, error) {
	if !s.engine.Serves(tenant, req.Model) {
		return nil, nil, modelNotFound(req.Model)
	}
	if err := s.hostedTools(req); err != nil {
		return nil, nil, err
	}
	resp := newResponse(req, id, created)
	t := &turn{req: req, rec: &Record{Tenant: tenant, Response: resp}, newChain: id, hdr: hdr}
	var history []wire.Item
	var err error
	switch {
	case req.PreviousResponseID != "":
		prev, err := s.store.GetResponse(ctx, tenant, req.PreviousResponseID)
		if errors.Is(err, ErrNotFound) && req.Prior != nil && req.Prior.ID == req.PreviousResponseID {
			history = req.Prior.Items
			if req.Prior.Session != "" {
				t.chainRoot, t.newChain = req.Prior.Session, ""
			}
			break
		}
		if errors.Is(err, ErrNotFound) {
			return nil, nil, notFoundf("previous_response_id", "previous_response_not_found", "Previous response with id '%s' not found.", req.PreviousResponseID)
		}
		if err != nil {
			return nil, nil, err
		}
		if !prev.Response.Ended() {
			return nil, nil, conflictf("previous_response_id", "previous_response_not_ended",
				"Previous response with id '%s' has not ended yet (status %s).", req.PreviousResponseID, prev.Response.Status)
		}
		t.base = prev.Context
		t.newChain = ""
		switch {
		case prev.Session != "":
			t.chainRoot = prev.Session
		case len(t.base) > 0:
			// Stored before records kept their session: the chain's
			// first response named it after itself.
			t.chainRoot = t.base[0].Chain
		}
		if history, err = s.loadChain(ctx, t, len(req.Input)); err != nil {
			return nil, nil, err
		}
	case req.Conversation != "":
		_, seg, err := s.store.GetConversation(ctx, tenant, req.Conversation)
		if errors.Is(err, ErrNotFound) {
			return nil, nil, notFoundf("conversation", "conversation_not_found", "Conversation with id '%s' not found.", req.Conversation)
		}
		if err != nil {
			return nil, nil, err
		}
		t.rec.Conversation, t.conversation, t.newChain = req.Conversation, req.Conversation, ""
		if history, err = s.store.LoadContext(ctx, []Segment{seg}); err != nil {
			return nil, nil, err
		}
	}
	if t.input, err = s.resolveInput(ctx, tenant, req.Input); err != nil {
		return nil, nil, err
	}
	t.history = append(history, t.input...)
	return t, compacted(t.history), nil
}

// hostedTools applies Config.HostedTools to the request's hosted tools,
// which the engine request never carries: refuses the request for the
// first, or counts and notes them.
func (s *Service) hostedTools(req *wire.CreateRequest) error {
	if len(req.HostedTools) == 0 {
		return nil
	}
	if s.cfg.HostedTools == HostedToolsReject {
		return wire.HostedToolError(req.HostedTools[0])
	}
	for _, h := range req.HostedTools {
		s.hostedDropped.WithLabelValues(h.Type).Inc()
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		types := make([]string, len(req.HostedTools))
		for i, h := range req.HostedTools {
			types[i] = h.Type
		}
		s.log.Debug("hosted tools dropped from a request", "types", types, "model", req.Model)
	}
	return nil
}

// WarmupResponse is the response object of a request that prepares a
// turn and runs none (WebSocket mode's generate:false): made as every
// response is, with a new id, in progress.
func WarmupResponse(req *wire.CreateRequest, created int64) *wire.Response {
	return newResponse(req, newID("resp_"), created)
}

func newResponse(req *wire.CreateRequest, id string, created int64) *wire.Response {
	resp := &wire.Response{
		ID: id, Object: "response", CreatedAt: created, Status: wire.StatusInProgress,
		Background: req.Background, Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens,
		Model: req.Model, Output: []wire.Item{}, ParallelToolCalls: true, Store: req.Store,
		Temperature: 1, TopP: 1, Text: req.Text, ToolChoice: json.RawMessage(`"auto"`),
		Tools: make([]json.RawMessage, 0, len(req.ToolsRaw)), Truncation: req.Truncation,
		User: req.User, PromptCacheKey: req.PromptCacheKey, SafetyIdentifier: req.SafetyIdentifier,
		Metadata: req.Metadata, Reasoning: req.Reasoning, ServiceTier: "auto",
		MaxToolCalls: req.MaxToolCalls, TopLogprobs: req.TopLogprobs,
		Prompt: req.Prompt, PromptCacheRetention: req.PromptCacheRetention,
	}
	if req.ParallelToolCalls != nil {
		resp.ParallelToolCalls = *req.ParallelToolCalls
	}
	if req.Temperature != nil {
		resp.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		resp.TopP = *req.TopP
	}
	if len(req.ToolChoice) > 0 {
		resp.ToolChoice = req.ToolChoice
	}
	resp.Tools = append(resp.Tools, req.ToolsRaw...)
	if resp.Metadata == nil {
		resp.Metadata = map[string]string{}
	}
	if req.ServiceTier != "" {
		resp.ServiceTier = req.ServiceTier
	}
	if req.PreviousResponseID != "" {
		resp.PreviousResponseID = &req.PreviousResponseID
	}
	if req.Conversation != "" {
		resp.Conversation = &wire.ConversationRef{ID: req.Conversation}
	}
	return resp
}

// resolveInput gives every input item an id and a status and replaces
// item references with the items they name.
func (s *Service) resolveInput(ctx context.Context, tenant string, in []wire.Item) ([]wire.Item, error) {
	out := make([]wire.Item, len(in))
	for i, it := range in {
		if it.Type == wire.ItemReference {
			ref, _, err := s.store.GetItem(ctx, tenant, it.ID)
			if errors.Is(err, ErrNotFound) {
				return nil, notFoundf(fmt.Sprintf("input[%d].id", i), "item_not_found", "Item with id '%s' not found.", it.ID)
			}
			if err != nil {
				return nil, err
			}
			// A copy of its own: the original keeps its place and id.
			it = ref
			it.ID = ""
		}
		if err := s.expand(tenant, &it, i); err != nil {
			return nil, err
		}
		if it.ID == "" {
			it.ID = newID(itemPrefix(it.Type))
		}
		if it.Status == "" {
			it.Status = wire.StatusCompleted
		}
		out[i] = it
	}
	return out, nil
}

// expand opens the sealed content of a reasoning or compaction item in
// input[i], which the engine is to see again: a reasoning item's text
// becomes its content, a compaction item's summary its one part.
func (s *Service) expand(tenant string, it *wire.Item, i int) error {
	var kind, part string
	switch {
	case it.Type == wire.ItemReasoning && it.EncryptedContent != "":
		kind, part = sealReasoning, wire.PartReasoning
	case it.Type == wire.ItemCompaction:
		kind, part = sealCompaction, wire.PartSummary
	default:
		return nil
	}
	text, err := s.sealer.open(kind, tenant, it.EncryptedContent)
	if err != nil {
		return wire.Invalidf(fmt.Sprintf("input[%d].encrypted_content", i), "invalid_encrypted_content",
			"The encrypted content of input[%d] (%s %s) could not be verified: %s. Send back encrypted_content exactly as this gateway returned it.",
			i, it.Type, it.ID, strings.TrimPrefix(err.Error(), errSealed.Error()+": "))
	}
	it.Content = []wire.ContentPart{{Type: part, Text: string(text)}}
	return nil
}

func itemPrefix(typ string) string {
	switch typ {
	case wire.ItemReasoning:
		return "rs_"
	case wire.ItemCompaction:
		return "cmp_"
	case wire.ItemCustomToolCall:
		return "ctc_"
	case wire.ItemCustomToolCallOutput:
		return "ctco_"
	case wire.ItemMCPListTools:
		return "mcpl_"
	case wire.ItemMCPCall:
		return "mcp_"
	case wire.ItemMCPApprovalRequest:
		return "mcpr_"
	case wire.ItemMCPApprovalResponse:
		return "mcpa_"
	case wire.ItemFunctionCall:
		return "fc_"
	case wire.ItemFunctionCallOutput:
		return "fco_"
	}
	return "msg_"
}

// fitAttempts bounds how often fit renders a conversation: whole, then
// its items chosen again each time the counted prompt came out longer
// than their counts said.
const fitAttempts = 5

// fit applies the model's context window to the rebuilt conversation and
// renders the engine request: "auto" truncation drops the oldest items
// (system and developer messages stay), "disabled" fails with
// ErrContextLength. Items are chosen by their own token counts; the
// rendered prompt is then counted as the engine will see it, and that
// count is the turn's.
func (s *Service) fit(t *turn, items []wire.Item) error {
	req := t.req
	limit := s.engine.ContextLength(req.Model)
	if limit <= 0 {
		// No window known: nothing to fit, and nothing counted here.
		return t.render(items)
	}
	budget := limit
	if req.MaxOutputTokens != nil {
		if *req.MaxOutputTokens >= limit {
			return wire.Invalidf("max_output_tokens", "context_length_exceeded",
				"This model's maximum context length is %d tokens. However, you requested %d output tokens (max_output_tokens), which leaves no room for the input. Please reduce max_output_tokens.", limit, *req.MaxOutputTokens)
		}
		budget -= *req.MaxOutputTokens
	}
	tok := s.engine.Tokenizer(req.Model)
	// The whole context is tried first, rendered and counted as the engine
	// will see it: the items are counted one by one only when it does not
	// fit and truncation may drop some, so that a turn that fits costs one
	// count of its prompt (with an incremental encoder, of its new end).
	kept, total, slack := items, 0, 0
	for attempt := 0; ; attempt++ {
		if err := t.render(kept); err != nil {
			return err
		}
		t.promptTokens, t.tokens = countPrompt(tok, t)
		if t.promptTokens <= budget {
			return nil
		}
		if req.Truncation != "auto" || attempt == fitAttempts-1 || len(kept) == countSystem(kept)+1 {
			return contextLengthError(max(t.promptTokens, total), budget)
		}
		if attempt > 0 {
			// The items' counts fell short of the rendered prompt's: ask
			// for that much more room and choose again.
			slack += t.promptTokens - budget
		}
		var err error
		if kept, total, err = fitItems(tok, req, items, budget-slack); err != nil {
			return err
		}
	}
}

// countPrompt counts t's prompt with tok. A prompt.PromptTokenizer (the
// model's own chat template and tokenizer) encodes it under t's session
// key, the one dispatch routes it by, so that the session's next turn,
// whose prompt extends this one, is encoded from this one's end only; the
// ids are returned for dispatch, which then hashes them without encoding
// again.
func countPrompt(tok prompt.Tokenizer, t *turn) (int, []uint32) {
	pt, ok := tok.(prompt.PromptTokenizer)
	if !ok {
		return prompt.Count(tok, t.prompt), nil
	}
	key := ""
	if !t.aside {
		key = dispatch.SessionKey(t.spec())
	}
	if t.tokenBuf == nil {
		t.tokenBuf = tokenBuffers.Get().(*[]uint32)
	}
	ids := pt.EncodePrompt((*t.tokenBuf)[:0], t.prompt, key)
	*t.tokenBuf = ids
	return len(ids), ids
}

// tokenBuffers recycles turns' prompt ids, which a long session's turns
// would otherwise allocate anew each time (4 bytes a token).
var tokenBuffers = sync.Pool{New: func() any { return new([]uint32) }}

// maxPooledTokens bounds the ids kept for reuse: a 256k-token prompt.
const maxPooledTokens = 256 << 10

// release drops the turn's engine body and gives its ids back once it has
// been sent and answered for the last time: neither dispatch nor the
// engine client holds them past the end of the engine's answer. The body
// is not pooled: a stored turn's write would hold it then. A leg rendered
// later renders and counts anew.
func (t *turn) release() {
	t.body = nil
	if b := t.tokenBuf; b != nil {
		t.tokens, t.tokenBuf = nil, nil
		if cap(*b) <= maxPooledTokens {
			tokenBuffers.Put(b)
		}
	}
}

// spec is the turn as dispatch takes it.
func (t *turn) spec() *dispatch.Spec {
	spec := &dispatch.Spec{
		Tenant: t.rec.Tenant, Model: t.req.Model,
		Path: "/v1/chat/completions", Body: t.body, ClientHeader: t.hdr,
		Conversation: t.conversation, ChainRoot: t.chainRoot, NewChain: t.newChain,
		ServiceTier: t.req.ServiceTier, Background: t.req.Background,
		Prompt: t.prompt, PromptTokens: t.promptTokens, Tokens: t.tokens,
		// Each rendering is a new buffer, never written once rendered.
		BodyImmutable: true,
	}
	if t.req.MaxOutputTokens != nil {
		spec.MaxOutputTokens = *t.req.MaxOutputTokens
	}
	if t.req.PromptCacheKey != nil {
		spec.PromptCacheKey = *t.req.PromptCacheKey
	}
	if t.req.SafetyIdentifier != nil {
		spec.SafetyIdentifier = *t.req.SafetyIdentifier
	}
	return spec
}

// fitItems chooses the items that fit budget by their token counts, and
// returns them with their total.
func fitItems(tok prompt.Tokenizer, req *wire.CreateRequest, items []wire.Item, budget int) ([]wire.Item, int, error) {
	total := 0
	if req.Instructions != nil {
		total += tok.Count(*req.Instructions) + messageOverhead
	}
	for i := range items {
		total += itemTokens(tok, &items[i])
	}
	if total <= budget {
		return items, total, nil
	}
	if req.Truncation != "auto" {
		return items, total, nil
	}
	kept := make([]wire.Item, 0, len(items))
	dropping := true
	for i := range items {
		it := &items[i]
		system := it.Type == wire.ItemMessage && (it.Role == "system" || it.Role == "developer")
		// A tool output without its call would be refused by the chat
		// template: it goes with the call.
		orphan := (it.Type == wire.ItemFunctionCallOutput || it.Type == wire.ItemCustomToolCallOutput) && len(kept) == countSystem(kept)
		if dropping && !system && i < len(items)-1 && (total > budget || orphan) {
			total -= itemTokens(tok, it)
			continue
		}
		if !system {
			dropping = false
		}
		kept = append(kept, *it)
	}
	if total > budget {
		return nil, total, contextLengthError(total, budget)
	}
	return kept, total, nil
}

func contextLengthError(total, budget int) error {
	return contextLengthf("Your input exceeds the context window of this model: about %d tokens, and %d fit. Please adjust your input, or set truncation to 'auto', and try again.", total, budget)
}

func countSystem(items []wire.Item) int {
	n := 0
	for i := range items {
		if items[i].Type == wire.ItemMessage && (items[i].Role == "system" || items[i].Role == "developer") {
			n++
		}
	}
	return n
}

// begin sends the turn down the turn path and returns it answered; the
// caller owns it and ends it.
func (s *Service) begin(ctx context.Context, t *turn, hdr http.Header) (*dispatch.Turn, error) {
	spec := t.spec()
	spec.ClientHeader = hdr
	dt, err := s.engine.Begin(ctx, spec)
	var ee *dispatch.EngineError
	if errors.As(err, &ee) {
		return nil, engineError(ee)
	}
	if err == nil {
		// The response names the served model that answers it, the
		// target of the rule that rewrote the one named, if any.
		t.rec.Response.Model = dt.Model()
		// The chain's next responses continue in this session.
		t.rec.Session = dt.SessionKey()
		if span := trace.SpanFromContext(ctx); t.conversation != "" && span.IsRecording() {
			span.SetAttributes(tracing.ConversationID.String(t.conversation))
		}
	}
	return dt, err
}

// engineError classifies an engine's refusal as dispatch.APIError maps it
// for every API, keeping the engine's message and status; a prompt too
// long for the window is the input's.
func engineError(e *dispatch.EngineError) error {
	if e.ContextLength() {
		return contextLengthf("Your input exceeds the context window of this model: %s", e.Message)
	}
	ae, _ := dispatch.APIError(e)
	return ae.WithClass(ErrEngine)
}

// Create makes a response. A background request is stored queued and
// returned at once; its events go to its event log (see Stream).
// Otherwise the turn runs now: sink, if not nil, gets every event as it
// happens, and Create returns the ended response. An error returned means
// no event was sent; once events flow, a failure ends the stream instead:
// the engine's with response.failed, the store's with an error event.
//
// A response is acknowledged only once it is stored: while the state
// store is down, a response that is to be stored is refused (ErrUnavailable,
// 503) before any engine is asked, and one the store fails to keep at its
// end is answered with the store's error, never as a response.
func (s *Service) Create(ctx context.Context, tenant string, req *wire.CreateRequest, hdr http.Header, sink Sink) (*wire.Response, error) {
	if s.engine == nil {
		return nil, errors.New("responses: service not started")
	}
	if req.Store {
		if err := s.store.Health(); err != nil {
			return nil, err
		}
	}
	if req.Background {
		return s.createBackground(ctx, tenant, req, hdr.Clone())
	}
	t, err := s.prepare(ctx, tenant, req, hdr, newID("resp_"), s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if err := s.autoCompact(ctx, t, hdr); err != nil {
		return nil, err
	}
	ms, err := s.mcpSetup(ctx, t)
	if err != nil {
		return nil, err
	}
	if ms != nil {
		defer ms.Close()
	}
	dt, err := s.begin(ctx, t, hdr)
	if err != nil {
		return nil, err
	}
	// From here the turn owns the response; it ends exactly once, in
	// endTurn, whatever happens to the client or the engine.
	r := s.newRun(t, sink, 0)
	r.held(func() {
		r.emitResponse("response.created")
		r.emitResponse("response.in_progress")
		r.prelude(t.pre)
	})
	engErr := r.consume(dt)
	dt.End(engErr)
	// Sent and answered: the engine request goes before the response is
	// stored, so that a long body is not held twice then (an MCP leg
	// renders its own).
	t.release()
	engErr = s.mcpLoop(ctx, t, r, ms, hdr, engErr)
	t.release()
	// The client going away cancels the response; a request ended for
	// another cause (the gateway shutting down) fails it, saying why.
	cancelled := ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled)
	if ctx.Err() != nil && !cancelled {
		engErr = context.Cause(ctx)
	}
	r.end(engErr, cancelled, s.cfg.Now().Unix())
	if err := s.endTurn(context.WithoutCancel(ctx), t, r, nil); err != nil && sink == nil {
		return nil, err
	}
	return t.rec.Response, nil
}

// endTurn stores the ended response (when it is stored) and only then
// announces its end, so a client never sees an end that a crash could
// take back. When the store fails, the end is not announced: those
// listening get an error event instead, and endTurn returns the error
// for a client that listens to nothing (storeFailure).
func (s *Service) endTurn(ctx context.Context, t *turn, r *run, j *job) error {
	resp := t.rec.Response
	if resp.Status == wire.StatusFailed && resp.Error != nil {
		s.log.Warn("response failed", "response", resp.ID, "err", resp.Error.Message)
	}
	typ := terminalEvent(resp.Status)
	seq := r.seq
	var data []byte
	var final *StreamEvent
	if typ != "" {
		data = r.event(&Event{Type: typ, Response: resp})
		if j != nil {
			// Kept with the record, in its batch: the event log never
			// says ended while the record does not.
			final = &StreamEvent{Seq: seq, Data: data}
		}
	}
	if resp.Store {
		items := make([]wire.Item, 0, len(t.input)+len(resp.Output))
		items = append(append(items, t.input...), resp.Output...)
		t.rec.Inputs = len(t.input)
		sctx, span := s.cfg.Tracer.Start(ctx, tracing.SpanStateSave, trace.SpanKindInternal)
		err := s.store.EndResponse(sctx, t.rec, t.base, items, final)
		tracing.Fail(span, err)
		span.End()
		if err != nil {
			// Nothing was written: a background record stays pending and
			// the next Start takes it over. Only those listening now hear
			// of the failure.
			s.log.Error("storing a response failed", "response", resp.ID, "err", cause(err))
			ae := storeFailure(err)
			resp.Status, resp.CompletedAt = wire.StatusFailed, nil
			resp.Error = &wire.ResponseError{Code: ae.Code, Message: ae.Message}
			r.seq = seq
			s.announce(r, j, "error", r.errorEvent(ae))
			return ae
		}
		s.rememberContext(t, items)
	}
	if typ != "" {
		s.announce(r, j, typ, data)
	}
	return nil
}

// announce sends a response's last event to those listening: the
// followers of its job, or the client's sink.
func (s *Service) announce(r *run, j *job, typ string, data []byte) {
	if j != nil {
		j.publish(typ, data)
	} else if r.sink != nil {
		r.sink.Event(typ, data)
	}
}
