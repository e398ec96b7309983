package responses

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/apierror"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/prompt"
)

// Defaults for Config.
const (
	DefaultWorkers            = 64
	DefaultMaxAttempts        = 2
	DefaultMaxQueued          = 10000
	DefaultMaxQueuedPerTenant = 1000
	DefaultRetryRefusedFor    = 10 * time.Minute
	DefaultCollectInterval    = time.Hour
)

// Waits between tries of a background response the engine refused.
const (
	// defaultRetryDelay is the wait when a refusal gives no RetryAfter.
	defaultRetryDelay = time.Second
	// maxRetryDelay caps one wait, whatever RetryAfter says.
	maxRetryDelay = 30 * time.Second
)

// Config configures a Service.
type Config struct {
	// Workers bounds the background responses running at once; more wait
	// queued. Default 64.
	Workers int
	// MaxAttempts is how many times a background response may be started.
	// One interrupted by a restart is re-run on the next Start until it
	// has been started this often, then marked failed. Default 2.
	MaxAttempts int
	// MaxQueued bounds the background responses the service holds that
	// have not ended, running ones included. Beyond it Create answers
	// ErrRateLimited (429, rate_limit_exceeded) before storing anything.
	// Default 10000.
	MaxQueued int
	// MaxQueuedPerTenant is MaxQueued for each tenant. Default 1000.
	MaxQueuedPerTenant int
	// RetryRefusedFor is how long a background response keeps trying
	// when the engine refuses it with "try again later" (flow control
	// shedding load, a gateway shutting down), counted from the first
	// refusal. Each wait is the refusal's RetryAfter, at most 30s. Then
	// the response fails with rate_limit_exceeded (a 429 refusal) or
	// server_overloaded. Default 10m; negative fails at the first refusal.
	RetryRefusedFor time.Duration
	// CollectInterval is the time between retention sweeps. Default 1h;
	// negative disables the collector.
	CollectInterval time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// EnsureDefaults fills the zero fields.
func (c *Config) EnsureDefaults() {
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = DefaultMaxQueued
	}
	if c.MaxQueuedPerTenant <= 0 {
		c.MaxQueuedPerTenant = DefaultMaxQueuedPerTenant
	}
	if c.RetryRefusedFor == 0 {
		c.RetryRefusedFor = DefaultRetryRefusedFor
	}
	if c.CollectInterval == 0 {
		c.CollectInterval = DefaultCollectInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Service answers the Responses and Conversations API on a Store, sending
// turns down the turn path (Engine). Create with New, then Start it;
// Close it before closing the store.
type Service struct {
	store  Store
	cfg    Config
	log    *slog.Logger
	engine Engine
	// sem holds one token per running background response.
	sem chan struct{}
	// ctx is the parent of background responses; Close cancels it.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu struct {
		sync.Mutex
		// protects the fields below
		jobs    map[string]*job
		started bool
		// held counts the background responses that have not ended, in
		// all and by tenant: from Create's admission to the job's end.
		held         int
		heldByTenant map[string]int
	}
}

// New builds a Service on store that runs its turns on engine. It starts
// nothing: no background response runs until Start.
func New(store Store, engine Engine, cfg Config) *Service {
	cfg.EnsureDefaults()
	s := &Service{store: store, engine: engine, cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, cfg.Workers)}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.mu.jobs = make(map[string]*job)
	s.mu.heldByTenant = make(map[string]int)
	return s
}

// Store is the service's state store.
func (s *Service) Store() Store { return s.store }

// Start re-queues (or fails) the background responses a previous process
// left unfinished and starts the retention collector. It is called once;
// ctx bounds the start itself, Close stops what it started.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.mu.started {
		s.mu.Unlock()
		return errors.New("responses: service already started")
	}
	s.mu.started = true
	s.mu.Unlock()

	recs, err := s.store.PendingJobs(ctx)
	if err != nil {
		return fmt.Errorf("responses: listing unfinished background responses: %w", err)
	}
	for _, rec := range recs {
		s.recover(rec)
	}
	if s.cfg.CollectInterval > 0 {
		s.wg.Add(1)
		go s.collect()
	}
	return nil
}

// Close stops the collector and the background responses and waits for
// them. A background response stopped by Close is not ended: it stays
// pending in the store and the next Start runs it again.
func (s *Service) Close() error {
	s.stop()
	s.wg.Wait()
	return nil
}

func (s *Service) collect() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.CollectInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.store.Collect(s.ctx, s.cfg.Now())
		if err != nil && s.ctx.Err() == nil {
			s.log.Warn("retention sweep failed", "err", err)
		} else if n > 0 {
			s.log.Info("retention sweep", "removed", n)
		}
	}
}

// newID returns prefix followed by 32 random hex digits.
func newID(prefix string) string {
	var b [16]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// turn is a response being made: the request, its record, and the engine
// request rebuilt from its context.
type turn struct {
	req *CreateRequest
	rec *Record
	// base is the context the response continues (its previous
	// response's), nil for a new chain or a conversation.
	base   []Segment
	input  []Item
	body   []byte
	prompt *prompt.Prompt
	// promptTokens is the prompt's token count, computed once, when the
	// context window was checked; 0 leaves the count to dispatch.
	promptTokens int
	// conversation or chainRoot names the session for routing.
	conversation, chainRoot string
}

// prepare checks the request against the store and builds the turn:
// the response object, the whole context and the engine request.
func (s *Service) prepare(ctx context.Context, tenant string, req *CreateRequest, id string, created int64) (*turn, error) {
	resp := newResponse(req, id, created)
	t := &turn{req: req, rec: &Record{Tenant: tenant, Response: resp}, chainRoot: id}
	var history []Item
	var err error
	switch {
	case req.PreviousResponseID != "":
		prev, err := s.store.GetResponse(ctx, tenant, req.PreviousResponseID)
		if errors.Is(err, ErrNotFound) {
			return nil, notFoundf("previous_response_id", "previous_response_not_found", "Previous response with id '%s' not found.", req.PreviousResponseID)
		}
		if err != nil {
			return nil, err
		}
		if !prev.Response.Ended() {
			return nil, conflictf("previous_response_id", "previous_response_not_ended",
				"Previous response with id '%s' has not ended yet (status %s).", req.PreviousResponseID, prev.Response.Status)
		}
		t.base = prev.Context
		if len(t.base) > 0 {
			t.chainRoot = t.base[0].Chain
		}
		if history, err = s.store.LoadContext(ctx, t.base); err != nil {
			return nil, err
		}
	case req.Conversation != "":
		_, seg, err := s.store.GetConversation(ctx, tenant, req.Conversation)
		if errors.Is(err, ErrNotFound) {
			return nil, notFoundf("conversation", "conversation_not_found", "Conversation with id '%s' not found.", req.Conversation)
		}
		if err != nil {
			return nil, err
		}
		t.rec.Conversation, t.conversation, t.chainRoot = req.Conversation, req.Conversation, ""
		if history, err = s.store.LoadContext(ctx, []Segment{seg}); err != nil {
			return nil, err
		}
	}
	if t.input, err = s.resolveInput(ctx, tenant, req.Input); err != nil {
		return nil, err
	}
	if err := s.fit(t, append(history, t.input...)); err != nil {
		return nil, err
	}
	return t, nil
}

func newResponse(req *CreateRequest, id string, created int64) *Response {
	resp := &Response{
		ID: id, Object: "response", CreatedAt: created, Status: StatusInProgress,
		Background: req.Background, Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens,
		Model: req.Model, Output: []Item{}, ParallelToolCalls: true, Store: req.Store,
		Temperature: 1, TopP: 1, Text: req.Text, ToolChoice: json.RawMessage(`"auto"`),
		Tools: make([]json.RawMessage, 0, len(req.Tools)), Truncation: req.Truncation,
		User: req.User, PromptCacheKey: req.PromptCacheKey, SafetyIdentifier: req.SafetyIdentifier,
		Metadata: req.Metadata, Reasoning: req.Reasoning, ServiceTier: "auto",
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
	for _, t := range req.Tools {
		resp.Tools = append(resp.Tools, t.Raw)
	}
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
		resp.Conversation = &ConversationRef{ID: req.Conversation}
	}
	return resp
}

// resolveInput gives every input item an id and a status and replaces
// item references with the items they name.
func (s *Service) resolveInput(ctx context.Context, tenant string, in []Item) ([]Item, error) {
	out := make([]Item, len(in))
	for i, it := range in {
		if it.Type == ItemReference {
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
		if it.ID == "" {
			it.ID = newID(itemPrefix(it.Type))
		}
		if it.Status == "" {
			it.Status = StatusCompleted
		}
		out[i] = it
	}
	return out, nil
}

func itemPrefix(typ string) string {
	switch typ {
	case ItemFunctionCall:
		return "fc_"
	case ItemFunctionCallOutput:
		return "fco_"
	}
	return "msg_"
}

// fitAttempts bounds how often fit re-renders a conversation whose
// counted prompt came out longer than its items' counts said.
const fitAttempts = 4

// fit applies the model's context window to the rebuilt conversation and
// renders the engine request: "auto" truncation drops the oldest items
// (system and developer messages stay), "disabled" fails with
// ErrContextLength. Items are chosen by their own token counts; the
// rendered prompt is then counted as the engine will see it, and that
// count is the turn's.
func (s *Service) fit(t *turn, items []Item) error {
	req := t.req
	limit := s.engine.ContextLength(req.Model)
	budget := limit
	if req.MaxOutputTokens != nil {
		budget -= *req.MaxOutputTokens
	}
	tok := s.engine.Tokenizer()
	slack := 0
	for attempt := 0; ; attempt++ {
		kept, total, err := fitItems(tok, req, items, budget-slack)
		if err != nil {
			return err
		}
		if t.body, t.prompt, err = renderChat(req, kept); err != nil {
			return fmt.Errorf("responses: rendering the engine request: %w", err)
		}
		if limit <= 0 {
			return nil
		}
		t.promptTokens = prompt.Count(tok, t.prompt)
		if t.promptTokens <= budget {
			return nil
		}
		if req.Truncation != "auto" || attempt == fitAttempts-1 || len(kept) == countSystem(kept)+1 {
			return contextLengthError(max(t.promptTokens, total), budget)
		}
		// The items' counts fell short of the rendered prompt's: ask for
		// that much more room and choose again.
		slack += t.promptTokens - budget
	}
}

// fitItems chooses the items that fit budget by their token counts, and
// returns them with their total. A budget of 0 or less with no context
// window known keeps everything.
func fitItems(tok prompt.Tokenizer, req *CreateRequest, items []Item, budget int) ([]Item, int, error) {
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
	kept := make([]Item, 0, len(items))
	dropping := true
	for i := range items {
		it := &items[i]
		system := it.Type == ItemMessage && (it.Role == "system" || it.Role == "developer")
		// A tool output without its call would be refused by the chat
		// template: it goes with the call.
		orphan := it.Type == ItemFunctionCallOutput && len(kept) == countSystem(kept)
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

func countSystem(items []Item) int {
	n := 0
	for i := range items {
		if items[i].Type == ItemMessage && (items[i].Role == "system" || items[i].Role == "developer") {
			n++
		}
	}
	return n
}

// begin sends the turn down the turn path and returns it answered; the
// caller owns it and ends it.
func (s *Service) begin(ctx context.Context, t *turn, hdr http.Header) (*dispatch.Turn, error) {
	spec := &dispatch.Spec{
		Tenant: t.rec.Tenant, Model: t.req.Model,
		Path: "/v1/chat/completions", Body: t.body, ClientHeader: hdr,
		Conversation: t.conversation, ChainRoot: t.chainRoot,
		ServiceTier: t.req.ServiceTier, Background: t.req.Background,
		Prompt: t.prompt, PromptTokens: t.promptTokens,
	}
	if t.req.MaxOutputTokens != nil {
		spec.MaxOutputTokens = *t.req.MaxOutputTokens
	}
	dt, err := s.engine.Begin(ctx, spec)
	var ee *dispatch.EngineError
	if errors.As(err, &ee) {
		return nil, engineError(ee)
	}
	return dt, err
}

// engineError classifies an engine's refusal, keeping the engine's
// message and status.
func engineError(e *dispatch.EngineError) error {
	if e.ContextLength() {
		return contextLengthf("Your input exceeds the context window of this model: %s", e.Message)
	}
	status := e.Status
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	return apierror.New(status, e.Code, "The model server refused the request: %s", e.Message).WithParam(e.Param).WithClass(ErrEngine)
}

// Create makes a response. A background request is stored queued and
// returned at once; its events go to its event log (see Stream).
// Otherwise the turn runs now: sink, if not nil, gets every event as it
// happens, and Create returns the ended response. An error returned means
// no event was sent; once events flow, a failure ends the stream with
// response.failed instead.
func (s *Service) Create(ctx context.Context, tenant string, req *CreateRequest, hdr http.Header, sink Sink) (*Response, error) {
	if s.engine == nil {
		return nil, errors.New("responses: service not started")
	}
	if req.Background {
		return s.createBackground(ctx, tenant, req, hdr.Clone())
	}
	t, err := s.prepare(ctx, tenant, req, newID("resp_"), s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	dt, err := s.begin(ctx, t, hdr)
	if err != nil {
		return nil, err
	}
	// From here the turn owns the response; it ends exactly once, in
	// endTurn, whatever happens to the client or the engine.
	r := newRun(t.rec.Response, sink, 0)
	r.emitResponse("response.created")
	r.emitResponse("response.in_progress")
	engErr := r.consume(dt)
	dt.End(engErr)
	cancelled := ctx.Err() != nil
	r.end(engErr, cancelled, s.cfg.Now().Unix())
	s.endTurn(context.WithoutCancel(ctx), t, r, nil)
	return t.rec.Response, nil
}

// endTurn stores the ended response (when it is stored) and only then
// announces its end, so a client never sees an end that a crash could
// take back.
func (s *Service) endTurn(ctx context.Context, t *turn, r *run, j *job) {
	resp := t.rec.Response
	if resp.Status == StatusFailed && resp.Error != nil {
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
		items := make([]Item, 0, len(t.input)+len(resp.Output))
		items = append(append(items, t.input...), resp.Output...)
		t.rec.Inputs = len(t.input)
		if err := s.store.EndResponse(ctx, t.rec, t.base, items, final); err != nil {
			// Nothing was written: a background record stays pending and
			// the next Start takes it over. Only those listening now hear
			// of the failure.
			s.log.Error("storing a response failed", "response", resp.ID, "err", err)
			resp.Status, resp.CompletedAt = StatusFailed, nil
			resp.Error = &ResponseError{Code: "server_error", Message: "The response could not be stored."}
			typ = "response.failed"
			r.seq = seq
			data = r.event(&Event{Type: typ, Response: resp})
		}
	}
	if typ == "" {
		return
	}
	if j != nil {
		j.publish(typ, data)
	} else if r.sink != nil {
		r.sink(typ, data)
	}
}

// getRecord reads a response record, not found in the OpenAI shape.
func (s *Service) getRecord(ctx context.Context, tenant, id string) (*Record, error) {
	rec, err := s.store.GetResponse(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return nil, notFoundf("", "not_found", "No response found with id '%s'.", id)
	}
	return rec, err
}

// Get returns a stored response.
func (s *Service) Get(ctx context.Context, tenant, id string) (*Response, error) {
	rec, err := s.getRecord(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return rec.Response, nil
}

// Delete removes a stored response; a running background response is
// cancelled first.
func (s *Service) Delete(ctx context.Context, tenant, id string) (*Deleted, error) {
	if _, err := s.getRecord(ctx, tenant, id); err != nil {
		return nil, err
	}
	if err := s.stopJob(ctx, id); err != nil {
		return nil, err
	}
	if err := s.store.DeleteResponse(ctx, tenant, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, notFoundf("", "not_found", "No response found with id '%s'.", id)
		}
		return nil, err
	}
	return &Deleted{ID: id, Object: "response.deleted", Deleted: true}, nil
}

// stopJob stops the background job of response id, if one runs, and waits
// for it to end (or for ctx).
func (s *Service) stopJob(ctx context.Context, id string) error {
	j := s.job(id)
	if j == nil {
		return nil
	}
	j.stop()
	select {
	case <-j.ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel stops a background response and its engine request; it ends
// cancelled. Cancelling one that has ended returns it as it is.
func (s *Service) Cancel(ctx context.Context, tenant, id string) (*Response, error) {
	rec, err := s.getRecord(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if !rec.Response.Background {
		return nil, conflictf("", "invalid_request", "Only responses created with background: true can be cancelled.")
	}
	if rec.Response.Ended() {
		return rec.Response, nil
	}
	if err := s.stopJob(ctx, id); err != nil {
		return nil, err
	}
	return s.Get(ctx, tenant, id)
}

// InputItems pages through a response's own input items.
func (s *Service) InputItems(ctx context.Context, tenant, id string, opts ListOptions) (*ItemList, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	rec, err := s.getRecord(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if rec.Job != nil || rec.Input != nil {
		return pageSlice(rec.Input, opts)
	}
	seg := Segment{Chain: rec.Own.Chain, From: rec.Own.From, To: rec.Own.From + uint32(rec.Inputs)}
	items, more, err := s.store.ListItems(ctx, tenant, seg, opts)
	if err != nil {
		return nil, err
	}
	return newItemList(items, more), nil
}

// Stream replays a background response's events after sequence number
// after, and follows it live while it runs.
func (s *Service) Stream(ctx context.Context, tenant, id string, after int, sink Sink) error {
	rec, err := s.getRecord(ctx, tenant, id)
	if err != nil {
		return err
	}
	if !rec.Response.Background {
		return invalidf("stream", "invalid_value", "Only responses created with background: true can be streamed again.")
	}
	if j := s.job(id); j != nil {
		j.follow(ctx, after, sink)
		return nil
	}
	evs, err := s.store.Events(ctx, id, after)
	if err != nil {
		return err
	}
	for _, data := range evs {
		var h struct {
			Type string `json:"type"`
		}
		json.Unmarshal(data, &h)
		if sink(h.Type, data) != nil {
			return nil
		}
	}
	return nil
}

func (o *ListOptions) validate() error {
	if o.Limit == 0 {
		o.Limit = 20
	}
	if o.Limit < 1 || o.Limit > 100 {
		return invalidf("limit", "invalid_value", "Invalid 'limit': expected a value between 1 and 100, but got %d instead.", o.Limit)
	}
	switch o.Order {
	case "":
		o.Order = "desc"
	case "asc", "desc":
	default:
		return invalidf("order", "invalid_value", "Invalid value: '%s'. Supported values are: 'asc' and 'desc'.", o.Order)
	}
	return nil
}

// pageSlice pages through items held in memory.
func pageSlice(all []Item, opts ListOptions) (*ItemList, error) {
	ordered := make([]Item, len(all))
	copy(ordered, all)
	if opts.Order == "desc" {
		for i, j := 0, len(ordered)-1; i < j; i, j = i+1, j-1 {
			ordered[i], ordered[j] = ordered[j], ordered[i]
		}
	}
	start := 0
	if opts.After != "" {
		start = -1
		for i := range ordered {
			if ordered[i].ID == opts.After {
				start = i + 1
			}
		}
		if start < 0 {
			return nil, invalidf("after", "invalid_value", "Invalid 'after': no item with id '%s' in this list.", opts.After)
		}
	}
	page := ordered[start:]
	more := len(page) > opts.Limit
	if more {
		page = page[:opts.Limit]
	}
	return newItemList(page, more), nil
}

func newItemList(items []Item, more bool) *ItemList {
	l := &ItemList{Object: "list", Data: items, HasMore: more}
	if l.Data == nil {
		l.Data = []Item{}
	}
	if n := len(items); n > 0 {
		l.FirstID, l.LastID = &items[0].ID, &items[n-1].ID
	}
	return l
}

// job is a background response in this process: its cancel function and
// its events, kept in memory for live followers while it runs.
type job struct {
	id, tenant string
	cancel     context.CancelFunc
	// cancelled is set when a client (not shutdown) stops the job.
	cancelled atomic.Bool
	// ended is closed once the response has ended and been stored, or
	// has been left pending by shutdown.
	ended chan struct{}

	mu struct {
		sync.Mutex
		// protects the fields below
		events  []storedEvent
		changed chan struct{}
		done    bool
	}
}

type storedEvent struct {
	typ  string
	data []byte
}

func (j *job) stop() {
	j.cancelled.Store(true)
	j.cancel()
}

// publish makes an event visible to followers.
func (j *job) publish(typ string, data []byte) {
	j.mu.Lock()
	j.mu.events = append(j.mu.events, storedEvent{typ, data})
	close(j.mu.changed)
	j.mu.changed = make(chan struct{})
	j.mu.Unlock()
}

func (j *job) finish() {
	j.mu.Lock()
	j.mu.done = true
	close(j.mu.changed)
	j.mu.changed = make(chan struct{})
	j.mu.Unlock()
	close(j.ended)
}

// follow sends the events after sequence number after, then each new one,
// until the job is done, ctx ends or the sink fails.
func (j *job) follow(ctx context.Context, after int, sink Sink) {
	next := max(after+1, 0)
	for {
		j.mu.Lock()
		var evs []storedEvent
		if next < len(j.mu.events) {
			evs = j.mu.events[next:]
		}
		changed, done := j.mu.changed, j.mu.done
		j.mu.Unlock()
		for _, ev := range evs {
			if sink(ev.typ, ev.data) != nil {
				return
			}
			next++
		}
		if done {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Service) job(id string) *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.jobs[id]
}

// createBackground admits a background request against the queue caps,
// then stores it queued and starts its job. A refused request leaves
// nothing behind.
func (s *Service) createBackground(ctx context.Context, tenant string, req *CreateRequest, hdr http.Header) (*Response, error) {
	if err := s.hold(tenant); err != nil {
		return nil, err
	}
	t, err := s.prepare(ctx, tenant, req, newID("resp_"), s.cfg.Now().Unix())
	if err == nil {
		var resp *Response
		if resp, err = s.enqueue(ctx, t, hdr); err == nil {
			// The job holds the admission now, and gives it back at its end.
			return resp, nil
		}
	}
	s.unhold(tenant)
	return nil, err
}

// hold admits one more background response of tenant, or answers
// ErrRateLimited when the service or the tenant holds as many as allowed.
func (s *Service) hold(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.mu.heldByTenant[tenant] >= s.cfg.MaxQueuedPerTenant:
		return rateLimitedf("Too many background responses: you have %d that have not finished, the most allowed. Wait for some to finish, or cancel some, and try again.", s.mu.heldByTenant[tenant])
	case s.mu.held >= s.cfg.MaxQueued:
		return rateLimitedf("Too many background responses are waiting to run on this server. Try again later.")
	}
	s.holdLocked(tenant)
	return nil
}

func (s *Service) holdLocked(tenant string) {
	s.mu.held++
	s.mu.heldByTenant[tenant]++
}

// unhold gives back an admission taken by hold.
func (s *Service) unhold(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.held--
	if s.mu.heldByTenant[tenant]--; s.mu.heldByTenant[tenant] <= 0 {
		delete(s.mu.heldByTenant, tenant)
	}
}

// enqueue stores a background response as queued and hands it to a
// worker. From here the job owns the response.
func (s *Service) enqueue(ctx context.Context, t *turn, hdr http.Header) (*Response, error) {
	resp := t.rec.Response
	resp.Status = StatusQueued
	t.rec.Input = t.input
	t.rec.Job = &Job{Request: t.req.raw}
	if err := s.store.PutResponse(ctx, t.rec, true); err != nil {
		return nil, err
	}
	snapshot := *resp
	s.start(t, hdr)
	return &snapshot, nil
}

// start registers the job and runs it on a worker. The caller has taken
// an admission (hold) for it; the job gives it back when it ends.
func (s *Service) start(t *turn, hdr http.Header) {
	id := t.rec.Response.ID
	ctx, cancel := context.WithCancel(s.ctx)
	j := &job{id: id, tenant: t.rec.Tenant, cancel: cancel, ended: make(chan struct{})}
	j.mu.changed = make(chan struct{})
	// next is the sequence number of the next event. Events are emitted
	// by whoever runs r: this goroutine until the go statement below,
	// then the job's; so next needs no lock.
	next := 0
	sink := func(typ string, data []byte) error {
		if err := s.store.AppendEvent(context.Background(), id, next, data); err != nil {
			s.log.Warn("keeping a stream event failed", "response", id, "err", err)
		}
		next++
		j.publish(typ, data)
		return nil
	}
	r := newRun(t.rec.Response, sink, 0)
	r.emitResponse("response.created")
	r.emitResponse("response.queued")
	s.mu.Lock()
	s.mu.jobs[id] = j
	s.mu.Unlock()
	s.wg.Add(1)
	go s.run(ctx, j, t, r, hdr)
}

// run is a background response's worker. It owns the response until it
// ends (or shutdown leaves it pending for the next Start).
func (s *Service) run(ctx context.Context, j *job, t *turn, r *run, hdr http.Header) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.mu.jobs, j.id)
		s.mu.Unlock()
		s.unhold(j.tenant)
		j.finish()
		j.cancel()
	}()
	engErr := s.work(ctx, t, r, hdr)
	cancelled := j.cancelled.Load()
	if ctx.Err() != nil && !cancelled {
		// Shutdown: the response stays pending; the next Start re-runs it.
		return
	}
	r.end(engErr, cancelled, s.cfg.Now().Unix())
	var e *apierror.Error
	if errors.As(engErr, &e) && e.Code != "" && r.resp.Error != nil {
		r.resp.Error.Code = e.Code
	}
	s.endTurn(context.Background(), t, r, j)
}

// work runs a background response's turn on a worker slot and returns
// the engine's failure, if any. When ctx ends first it returns early; the
// caller tells a cancel from shutdown. A refusal that says "try again
// later" is tried again after its RetryAfter, off the worker slot, for up
// to Config.RetryRefusedFor.
func (s *Service) work(ctx context.Context, t *turn, r *run, hdr http.Header) error {
	if !s.takeWorker(ctx) {
		return ctx.Err()
	}
	t.rec.Response.Status = StatusInProgress
	t.rec.Job.Attempts++
	if err := s.store.PutResponse(ctx, t.rec, true); err != nil {
		s.log.Warn("storing a background response failed", "response", t.rec.Response.ID, "err", err)
	}
	r.emitResponse("response.in_progress")
	var refusedAt time.Time
	for refusals := 1; ; refusals++ {
		dt, err := s.begin(ctx, t, hdr)
		if err == nil {
			err = r.consume(dt)
			dt.End(err)
			<-s.sem
			return err
		}
		<-s.sem
		var shed *dispatch.ShedError
		if ctx.Err() != nil || !errors.As(err, &shed) {
			return err
		}
		if refusedAt.IsZero() {
			refusedAt = time.Now()
		}
		left := s.cfg.RetryRefusedFor - time.Since(refusedAt)
		if left <= 0 {
			s.log.Warn("background response refused until it gave up", "response", t.rec.Response.ID, "refusals", refusals, "err", err)
			return refusedError(err)
		}
		wait := shed.RetryAfter
		if wait <= 0 {
			wait = defaultRetryDelay
		}
		// Jitter, so that the jobs one overload refused together do not
		// all come back at the same instant.
		wait = min(wait+mrand.N(wait/4+1), maxRetryDelay, left)
		if !sleep(ctx, wait) || !s.takeWorker(ctx) {
			return ctx.Err()
		}
	}
}

// takeWorker waits for a worker slot; false if ctx ends first.
func (s *Service) takeWorker(ctx context.Context) bool {
	select {
	case s.sem <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleep waits d; false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refusedError is why a background response the engine kept refusing
// failed, in the client's terms: the refusal's own text is the gateway's,
// not the client's.
func refusedError(err error) *apierror.Error {
	var shed *dispatch.ShedError
	if errors.As(err, &shed) && shed.Status == http.StatusTooManyRequests {
		return rateLimitedf("This background response was not run: your rate limits kept refusing it. Try again later.")
	}
	return apierror.Unavailable("server_overloaded",
		"This background response was not run: the model servers were overloaded and kept refusing it. Try again later.").WithClass(ErrEngine)
}

// recover takes over a background response a previous process left
// unfinished: re-runs it, or fails it once it has been started
// MaxAttempts times. Either way it is never silently lost.
func (s *Service) recover(rec *Record) {
	id := rec.Response.ID
	fail := func(msg string) {
		rec.Response.Status = StatusFailed
		rec.Response.Error = &ResponseError{Code: "server_error", Message: msg}
		rec.Inputs = len(rec.Input)
		if err := s.store.EndResponse(s.ctx, rec, nil, rec.Input, nil); err != nil {
			s.log.Error("failing an interrupted background response failed", "response", id, "err", err)
		}
	}
	if rec.Job.Attempts >= s.cfg.MaxAttempts {
		fail(fmt.Sprintf("The gateway restarted while this background response was running, after %d attempts; it is not retried again.", rec.Job.Attempts))
		return
	}
	req, err := DecodeCreateRequest(rec.Job.Request)
	if err != nil {
		fail("The gateway restarted while this background response was running, and its request could not be read again.")
		return
	}
	t, err := s.prepare(s.ctx, rec.Tenant, req, id, rec.Response.CreatedAt)
	if err != nil {
		fail("The gateway restarted while this background response was running, and it could not be run again: " + err.Error())
		return
	}
	t.rec.ExpiresAt = rec.ExpiresAt
	t.rec.Input = t.input
	t.rec.Job = rec.Job
	t.rec.Response.Status = StatusQueued
	if err := s.store.DropEvents(s.ctx, id); err != nil {
		s.log.Warn("dropping old stream events failed", "response", id, "err", err)
	}
	if err := s.store.PutResponse(s.ctx, t.rec, true); err != nil {
		s.log.Error("re-queueing a background response failed", "response", id, "err", err)
		return
	}
	s.log.Info("re-queued a background response interrupted by a restart", "response", id, "attempt", rec.Job.Attempts+1)
	// Admitted whatever the caps: it was accepted before the restart.
	s.mu.Lock()
	s.holdLocked(rec.Tenant)
	s.mu.Unlock()
	s.start(t, nil)
}
