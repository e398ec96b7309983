package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/budgets"
	"github.com/turnpike-gateway/turnpike/guard"
	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/models"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/tracing"
	"github.com/turnpike-gateway/turnpike/turns"
	"go.opentelemetry.io/otel/trace"
)

// Error classes of the turn path. Begin returns them wrapped, with the
// model or endpoint named.
var (
	// ErrModelNotFound: no pool serves the spec's model.
	ErrModelNotFound = errors.New("dispatch: model not found")
	// ErrNoEndpoint: no endpoint of the model could take the turn.
	ErrNoEndpoint = errors.New("dispatch: no endpoint available")
	// ErrStreamCut: the engine's stream broke before it ended.
	ErrStreamCut = errors.New("dispatch: the engine's stream broke")
)

// ShedError is flow control's refusal of a turn (429, 503 or 408, with
// when to try again and why), as Begin returns it: callers above dispatch
// act on it without reaching into turns.
type ShedError = turns.ShedError

// PriorityHeader is the client header that asks for a band.
const PriorityHeader = "X-Turnpike-Priority"

// hintHeaders are the client headers passed on to engines: routing hints,
// never credentials.
var hintHeaders = append([]string{PriorityHeader, "X-Request-Id"}, sessions.Headers...)

// Options configure a Dispatcher. Registry and Policy are required.
type Options struct {
	// Registry is the fleet. Required.
	Registry *pools.Registry
	// Policy picks endpoints. Required.
	Policy affinity.Policy
	// Sessions tracks session state (turns, gaps, pins); nil tracks none.
	Sessions *sessions.Store
	// Flow admits, queues and sheds turns; nil admits every turn at once.
	Flow *turns.Controller
	// Lane is the Policy's interactive lane, which admission leaves out of
	// the lower bands' room while it is held; the zero Lane is none.
	Lane turns.Lane
	// Hasher cuts token ids into KV-cache blocks; nil means 16-token
	// blocks.
	Hasher *kv.Hasher
	// Tokenizer counts and encodes the prompts of models Tokenizers does
	// not name; nil means prompt.Approx.
	Tokenizer prompt.Tokenizer
	// Tokenizers are the served models' own tokenizers, by model name
	// (pools.TokenizerConfig). A prompt.PromptTokenizer renders the
	// model's prompts itself and is handed the turn's session key, so that
	// it may encode only what a session's turn adds. Nil or missing
	// entries mean Tokenizer.
	Tokenizers map[string]prompt.Tokenizer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Metrics is where the dispatcher registers its collectors; nil
	// registers none.
	Metrics prometheus.Registerer
	// PD tunes prefill/decode disaggregation of the models that prefill
	// and decode pools serve (see sendPD); nil means the defaults.
	PD *affinity.PDConfig
	// Tracer traces each turn's admission, picks, legs and engine
	// requests under the span of Begin's context, and sends its context
	// to engines as traceparent; nil traces nothing.
	Tracer *tracing.Tracer
	// Models rewrites the models turns name (aliases, weighted rules with
	// fallbacks); SetModels replaces it. Nil rewrites none.
	Models *models.Table
	// Guard checks each turn's input before it is admitted; nil checks
	// nothing.
	Guard *guard.Guard
	// Budgets charges each turn to its tenant's budgets of requests and
	// tokens a minute (turns.Quota) before admission; nil: a ledger in
	// this process's memory, when Flow is set.
	Budgets *budgets.Ledger
	// Revisions assigns new sessions a revision while several serve their
	// model (weights, a preferred revision); nil sends them to the newest.
	Revisions *affinity.Revisions
	// HandOff tunes the hand-over of a draining endpoint's sessions
	// (HandOff) and its warm-ups; nil means the defaults, warm-ups on.
	HandOff *HandOffConfig
}

// Dispatcher runs turns on the fleet. Build it with New.
type Dispatcher struct {
	reg      *pools.Registry
	guard    *guard.Guard
	budgets  *budgets.Ledger
	policy   affinity.Policy
	sessions *sessions.Store
	flow     *turns.Controller
	hasher   *kv.Hasher
	// tok is the default tokenizer, toks the served models' own.
	tok  prompt.Tokenizer
	toks map[string]prompt.Tokenizer
	log  *slog.Logger
	// needsHashes: prompts are hashed only for policies that score by
	// prefix.
	needsHashes bool
	// capacity is flow control's view of each served model: every
	// endpoint serving it, across pools. Fixed with the registry.
	capacity map[string]*turns.ModelCapacity
	// maxMigrations is how often a stream may move (pools.Options).
	maxMigrations int
	retries       prometheus.Counter
	migrations    *prometheus.CounterVec
	resumedTokens prometheus.Counter
	// pd decides disaggregation for pdModels, the models with prefill and
	// decode pools; pdm are its metrics.
	pd       affinity.PDConfig
	pdModels map[string]bool
	pdm      *pdMetrics
	tr       *tracing.Tracer
	// models rewrites the model a turn names; fallbacks counts the turns
	// sent to a target's fallback.
	models    atomic.Pointer[models.Table]
	fallbacks prometheus.Counter
	// revisions assigns sessions their revision; revm counts by revision.
	revisions *affinity.Revisions
	revm      *revisionMetrics
	// handOff tunes HandOff, which reads the sessions' last prompts (nil
	// without sessions) and spends warmUps (nil when warm-ups are off).
	handOff HandOffConfig
	last    *lastPrompts
	warmUps *tokenBucket
	handed  handedOff
}

// New builds a Dispatcher. It starts nothing.
func New(opts Options) (*Dispatcher, error) {
	if opts.Registry == nil || opts.Policy == nil {
		return nil, errors.New("dispatch: Registry and Policy are required")
	}
	d := &Dispatcher{
		reg:           opts.Registry,
		policy:        opts.Policy,
		sessions:      opts.Sessions,
		flow:          opts.Flow,
		hasher:        opts.Hasher,
		tok:           opts.Tokenizer,
		log:           opts.Logger,
		tr:            opts.Tracer,
		needsHashes:   affinity.NeedsHashes(opts.Policy),
		guard:         opts.Guard,
		budgets:       opts.Budgets,
		capacity:      map[string]*turns.ModelCapacity{},
		maxMigrations: opts.Registry.Options().MaxMigrations,
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_upstream_retries_total",
			Help: "Engine requests retried on another endpoint before the first byte of the answer.",
		}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turnpike_stream_migrations_total",
			Help: "Streams whose engine died mid-answer, by what followed: resumed on another endpoint, not_resumable (a tool call, reasoning, several choices, a spent budget) or failed (no endpoint took it over).",
		}, []string{"result"}),
		resumedTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_prompt_tokens_resumed_total",
			Help: "Prompt tokens neither encoded nor hashed again because the conversation's previous turn had them (prompt.Memo).",
		}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "turnpike_model_fallbacks_total",
			Help: "Turns tried on a fallback model of their rule's target, which had no endpoint or shed them.",
		}),
	}
	d.models.Store(opts.Models)
	if d.budgets == nil && d.flow != nil {
		var err error
		if d.budgets, err = budgets.New(budgets.Options{Metrics: opts.Metrics, Logger: opts.Logger}); err != nil {
			return nil, fmt.Errorf("dispatch: %w", err)
		}
	}
	for _, r := range []string{migrationResumed, migrationNotResumable, migrationFailed} {
		d.migrations.WithLabelValues(r)
	}
	if d.hasher == nil {
		d.hasher = &kv.Hasher{}
	}
	if d.tok == nil {
		d.tok = prompt.Approx{}
	}
	d.toks = map[string]prompt.Tokenizer{}
	for m, tok := range opts.Tokenizers {
		if tok != nil {
			d.toks[m] = tok
		}
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	if opts.PD != nil {
		d.pd = *opts.PD
	}
	d.pd.EnsureDefaults()
	if err := d.pd.Validate(); err != nil {
		return nil, err
	}
	d.pdModels = map[string]bool{}
	d.pdm = newPDMetrics()
	if err := d.initHandOff(opts); err != nil {
		return nil, err
	}
	for _, m := range opts.Registry.Models() {
		d.capacity[m] = turns.NewModelCapacity(opts.Registry, m, opts.Lane)
		d.pdModels[m] = opts.Registry.Disaggregated(m)
	}
	if opts.Metrics != nil {
		for _, c := range append(append([]prometheus.Collector{d.retries, d.migrations, d.resumedTokens, d.fallbacks}, d.pdm.collectors()...), d.revm.collectors()...) {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("dispatch: %w", err)
			}
		}
	}
	return d, nil
}

// Serves reports whether tenant may ask for model (its tenancy's models)
// and a pool serves it, or one of the models its rewrite rules may send
// it to.
func (d *Dispatcher) Serves(tenant, model string) bool {
	return d.MayUse(tenant, model) && d.served(model) != ""
}

// MayUse reports whether tenant may ask for model by that name: every
// model, unless its tenancy lists the ones it may.
func (d *Dispatcher) MayUse(tenant, model string) bool {
	if d.flow == nil {
		return true
	}
	t := d.flow.Tenant(tenant)
	return t.MayUse(model)
}

// ContextLength is the smallest context window, in tokens, of the pools
// serving model; 0 if none says. For a model the rewrite rules take,
// the smallest of every served model they may send it to, fallbacks
// included: the prompt fits whichever answers.
func (d *Dispatcher) ContextLength(model string) int {
	if d.capacity[model] != nil {
		return d.contextLength(model)
	}
	n := 0
	for _, m := range d.models.Load().Targets(model) {
		if l := d.contextLength(m); l > 0 && (n == 0 || l < n) {
			n = l
		}
	}
	return n
}

func (d *Dispatcher) contextLength(model string) int {
	n := 0
	for _, p := range d.reg.PoolsFor(model) {
		if l := p.Model.ContextLength; l > 0 && (n == 0 || l < n) {
			n = l
		}
	}
	return n
}

// Tokenizer is the tokenizer the turns of model are counted and encoded
// with; for a model the rewrite rules take, that of the first served
// model they may send it to (Begin counts again for a target with
// another).
func (d *Dispatcher) Tokenizer(model string) prompt.Tokenizer {
	if m := d.served(model); m != "" {
		model = m
	}
	if tok, ok := d.toks[model]; ok {
		return tok
	}
	return d.tok
}

// Spec is one turn as its caller describes it. Begin reads it and keeps
// it until End; the caller must not change it in between.
type Spec struct {
	// Tenant owns the turn; Model is the model the client named: a
	// served model, or a name the rewrite rules (Options.Models) take.
	Tenant, Model string
	// Path is the engine route: "/v1/chat/completions" or "/v1/completions".
	Path string
	// Body is the engine request, sent as is.
	Body []byte
	// BodyImmutable says that Body is never written to, during the turn
	// or after it: the turn may keep it past End as its session's last
	// prompt (HandOff's warm-up) without a copy. A body in a buffer
	// that is reused leaves it false.
	BodyImmutable bool
	// ClientHeader is the client's request header, read for the session
	// and priority hints and passed on to the engine as routing hints
	// (never credentials); may be nil.
	ClientHeader http.Header
	// Conversation, ChainRoot, PromptCacheKey, SafetyIdentifier and
	// NewChain name the session when no session header does, in that
	// order (sessions.Derive); "" each when unknown. ChainRoot is the
	// session of the previous_response_id chain a turn continues;
	// SafetyIdentifier counts with a fingerprint of Prompt's opening
	// (prefixFingerprint); NewChain is the id of a response that starts a
	// chain, named only when nothing else names the session.
	Conversation, ChainRoot, PromptCacheKey, SafetyIdentifier, NewChain string
	// ServiceTier and Background are the body's priority hints; the
	// x-turnpike-priority header is read from ClientHeader.
	ServiceTier string
	Background  bool
	// Prompt is Body as the engine's chat template sees it. Begin counts
	// its tokens and, for policies that score by prefix, encodes and
	// hashes them.
	Prompt *prompt.Prompt
	// Tokens, when not nil, is the prompt as token ids (Prompt encoded by
	// the model's Tokenizer, or a completion prompt the client sent
	// as ids): Begin uses it instead of encoding.
	Tokens []uint32
	// PromptTokens, when > 0, is Prompt's token count already computed
	// with the model's Tokenizer: Begin does not count again. It is
	// also the count of a turn with neither Prompt nor Tokens.
	PromptTokens int
	// MaxOutputTokens is the output budget; 0 if unbounded.
	MaxOutputTokens int
	// Prior, when not nil, is what prompt.Memo knew of Prompt: Begin
	// encodes and hashes only what it does not share with the earlier
	// turn, and leaves its own chain for the next.
	Prior *prompt.Prior
}

// buffers recycles the token ids, block hashes and renders of routed
// prompts.
type buffers struct {
	tokens []uint32
	hashes []kv.BlockHash
	render []byte
}

var bufferPool = sync.Pool{New: func() any { return new(buffers) }}

// tokenBufs recycles token ids apart from their buffers: a turn gives its
// prompt's ids back once it is sent (Turn.dropTokens), 200 KB at 50k
// tokens, rather than holding them while it streams.
var tokenBufs sync.Pool

// takeTokens gives b room for token ids when a sent turn took its own.
func (b *buffers) takeTokens() {
	if b.tokens != nil {
		return
	}
	if p, ok := tokenBufs.Get().(*[]uint32); ok {
		b.tokens = (*p)[:0]
	}
}

// dropTokens gives the prompt's token ids back once the turn is sent:
// only a turn kept on its session's draining endpoint reads them again
// (lastPrompt, at its end).
func (t *Turn) dropTokens() {
	if t.stayed {
		return
	}
	t.tokens = nil
	b := t.bufs
	if b == nil || b.tokens == nil {
		return
	}
	if cap(b.tokens) <= maxPooledTokens {
		ids := b.tokens[:0]
		tokenBufs.Put(&ids)
	}
	b.tokens = nil
}

// maxPooledTokens keeps one huge prompt from pinning its buffers forever.
const maxPooledTokens = 1 << 20

// Begin runs a turn up to the engine's answer: model rewrite, session,
// admission, tokens and hashes, pick, send, retries before the first
// byte, fallback models. On success the caller owns the Turn and must
// call End exactly once; on error everything taken has been given back.
//
// A model the tenant may not ask for is not found (ErrModelNotFound).
// A model the rewrite rules take goes to the target they pick (by the
// session, so that a session's turns keep one) with the body's model
// member rewritten; Turn.Model says which served it.
func (d *Dispatcher) Begin(ctx context.Context, spec *Spec) (*Turn, error) {
	if !d.MayUse(spec.Tenant, spec.Model) {
		// Not found, as for a model that does not exist: a tenant learns
		// nothing of the models it may not use.
		return nil, d.modelNotFound(spec.Model)
	}
	key := SessionKey(spec)
	if m := d.models.Load(); m != nil {
		if route, ok := m.Resolve(&models.Request{Model: spec.Model, Tenant: spec.Tenant, Header: spec.ClientHeader, Session: key}); ok {
			return d.beginRouted(ctx, spec, key, route)
		}
	}
	return d.begin(ctx, spec, key)
}

// begin is Begin for spec's model as named, in session key.
func (d *Dispatcher) begin(ctx context.Context, spec *Spec, key string) (_ *Turn, err error) {
	t := &Turn{ctx: ctx, d: d, spec: spec, start: time.Now(), sessionKey: key}
	t.route = affinity.Request{
		Model:                spec.Model,
		Tenant:               spec.Tenant,
		SessionKey:           t.sessionKey,
		ExpectedOutputTokens: spec.MaxOutputTokens,
	}
	defer func() {
		if err != nil {
			if d.tr.On() {
				t.endSpans(err)
			}
			t.release(affinity.Outcome{Err: err}, false)
		}
	}()
	capacity := d.capacityOf(spec.Model)
	if capacity == nil {
		return nil, d.modelNotFound(spec.Model)
	}
	if len(d.reg.Serving(spec.Model)) == 0 && (d.flow == nil || !d.reg.Wake(spec.Model)) {
		// No endpoint listed (discovery found none, or all left) and no
		// wake hook to start one: a turn held in the queue would only
		// wait out its band's TTL. With a hook (now called), it waits in
		// flow control for the endpoint the hook starts.
		return nil, fmt.Errorf("%w: none serves %s", ErrNoEndpoint, spec.Model)
	}
	if d.guard != nil && spec.Prompt != nil {
		// Checked before admission: a refused turn holds no place.
		if err := d.guard.CheckInput(ctx, spec.Tenant, spec.Model, spec.Prompt); err != nil {
			return nil, err
		}
	}
	t.countPrompt()
	if d.tr.On() {
		t.annotate()
	}
	if d.flow != nil {
		// Charged once for the turn, retries and migrations included.
		if q := d.flow.Tenant(spec.Tenant).Quota; q.Budgeted() {
			cost := (&turns.Turn{InputTokens: t.route.PromptTokens, ExpectedOutputTokens: spec.MaxOutputTokens}).Cost()
			if t.budget, err = d.budgets.Reserve(ctx, spec.Tenant, spec.Model, &q, cost); err != nil {
				return nil, err
			}
		}
	}

	// The session's history informs admission; the turn counts as one of
	// the session's only once admitted, so that a client retrying after
	// 429s does not look like a fast agent loop.
	var state sessions.State
	tracked := t.sessionKey != "" && d.sessions != nil
	if tracked {
		state, _ = d.sessions.Get(spec.Tenant, t.sessionKey, t.start)
	}
	hints := turns.Hints{Priority: spec.ClientHeader.Get(PriorityHeader), ServiceTier: spec.ServiceTier, Background: spec.Background}
	if d.flow != nil {
		// The pinned endpoint held PrefixBlocks of the session's prompt
		// when its last turn was routed: at least that much of this
		// prompt is cached, so only the rest is the turn's prefill.
		cached := 0
		if state.Endpoint != "" {
			cached = min(state.PrefixBlocks*d.hasher.BlockTokens(), t.route.PromptTokens)
		}
		actx, span := d.tr.Start(ctx, tracing.SpanAdmission, trace.SpanKindInternal)
		ticket, err := d.flow.Acquire(actx, &turns.Turn{
			Tenant:               spec.Tenant,
			Hints:                hints,
			SessionKey:           t.sessionKey,
			Warm:                 state.Endpoint != "",
			SessionTurns:         state.Turns,
			MeanGap:              state.MeanGap,
			InputTokens:          t.route.PromptTokens,
			CachedTokens:         cached,
			ExpectedOutputTokens: spec.MaxOutputTokens,
			Enqueued:             t.start,
		}, capacity)
		endAdmission(span, ticket, err)
		if err != nil {
			return nil, err
		}
		t.ticket = ticket
		t.classified(ticket.Band())
		t.lent, t.onLent = ticket.OnLent(), ticket.OnLent()
	} else {
		t.classified(turns.Classify(turns.Tenant{}, hints))
		t.lent = t.band == turns.Background
	}
	if tracked {
		d.sessions.Touch(spec.Tenant, t.sessionKey, time.Now())
		t.touched = true
	}
	if t.bufs != nil && d.needsHashes && t.route.Hashes == nil {
		t.bufs.hashes = d.hasher.HashTokens(t.bufs.hashes[:0], spec.Model, t.tokens)
		t.route.Hashes = t.bufs.hashes
	}
	send := t.send
	if d.pdModels[spec.Model] {
		send = func(ctx context.Context, _ []byte, _ *pools.Endpoint) error { return t.sendPD(ctx) }
	}
	if err := send(ctx, spec.Body, nil); err != nil {
		return nil, err
	}
	if t.resp.StatusCode >= 300 {
		// The engine refused: nothing was computed, so routing must not
		// count the prompt as cached there.
		err := readEngineError(t.resp)
		t.End(err)
		return nil, err
	}
	t.dropTokens()
	return t, nil
}

// countPrompt counts the prompt's tokens, once for the whole turn, and
// encodes them when the policy will hash them.
func (t *Turn) countPrompt() {
	spec, d := t.spec, t.d
	tok := d.Tokenizer(spec.Model)
	switch {
	case spec.Tokens != nil:
		t.tokens = spec.Tokens
	case spec.Prompt != nil && d.needsHashes && t.resumePrompt(tok):
		return
	case spec.Prompt != nil && d.needsHashes:
		t.bufs = bufferPool.Get().(*buffers)
		t.bufs.takeTokens()
		if pt, ok := tok.(prompt.PromptTokenizer); ok {
			// The model's template renders the prompt; the session's
			// last prompt, remembered under its key, spares the
			// encoding of all but the new suffix.
			t.bufs.tokens = pt.EncodePrompt(t.bufs.tokens[:0], spec.Prompt, t.sessionKey)
		} else {
			t.bufs.tokens = prompt.Encode(tok, t.bufs.tokens[:0], spec.Prompt)
		}
		t.tokens = t.bufs.tokens
	case spec.PromptTokens > 0, spec.Prompt == nil:
		t.route.PromptTokens = spec.PromptTokens
		return
	default:
		t.route.PromptTokens = prompt.Count(tok, spec.Prompt)
		return
	}
	t.route.PromptTokens = len(t.tokens)
	if t.bufs == nil && d.needsHashes {
		t.bufs = bufferPool.Get().(*buffers)
	}
}

// send picks an endpoint other than exclude and sends body, retrying on
// another endpoint when the failure came before the engine's first byte
// (a connection error, an open breaker, a 5xx). Nothing is retried once
// the turn has the response.
func (t *Turn) send(ctx context.Context, body []byte, exclude *pools.Endpoint) error {
	d, spec := t.d, t.spec
	var buf [16]*pools.Endpoint
	candidates := t.candidates(d.reg.EndpointsFor(buf[:0], spec.Model))
	if t.picked == nil && exclude == nil {
		// A session handed over stays on its draining endpoint while its
		// new one is warmed; a failed send there is retried as any.
		t.picked = t.stayingOn()
		t.stayed = t.picked != nil
	}
	if exclude != nil && len(candidates) > 1 {
		candidates = without(candidates, exclude)
	}
	if len(candidates) == 0 {
		return d.modelNotFound(spec.Model)
	}
	header := t.header
	if header == nil {
		header = engineHeader(spec)
	}
	tokens := int64(t.route.PromptTokens + t.route.ExpectedOutputTokens)
	var lastErr error
	pref := affinityFrom(ctx)
	for attempt := 0; attempt <= d.reg.Options().MaxRetries && len(candidates) > 0; attempt++ {
		// A decoder picked before the P/D decision takes the first attempt.
		ep, err := t.picked, error(nil)
		t.picked = nil
		if ep == nil {
			if only := pref.preferred(candidates); only != nil {
				ep, err = t.pick(ctx, &t.route, []*pools.Endpoint{only})
			}
		}
		if ep == nil {
			ep, err = t.pick(ctx, &t.route, candidates)
		}
		if err != nil {
			if lastErr != nil {
				return lastErr
			}
			return fmt.Errorf("%w: %w", ErrNoEndpoint, err)
		}
		ectx, span := d.tr.Start(ctx, tracing.SpanEngine, trace.SpanKindClient)
		// A LoRA adapter is loaded there first when its pool loads on
		// demand; a failed load is retried elsewhere like a failed send.
		var resp *http.Response
		if err = d.reg.EnsureAdapter(ectx, ep, spec.Model, time.Now()); err == nil {
			resp, err = d.reg.Client().Send(ectx, ep, spec.Path, t.withPriority(ep, body), d.traced(ectx, header), tokens)
		}
		startEngine(span, ep, resp, err)
		if err == nil {
			t.resp, t.ep, t.engine = resp, ep, span
			if pref != nil {
				pref.set(ep.ID)
			}
			return nil
		}
		d.policy.Done(&t.route, ep, affinity.Outcome{Err: err})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, pools.ErrUpstream) && !errors.Is(err, pools.ErrBreakerOpen) {
			return err
		}
		d.log.Debug("retrying on another endpoint", "endpoint", ep.ID, "err", err)
		d.retries.Inc()
		lastErr = err
		candidates = without(candidates, ep)
	}
	return lastErr
}

// classified records the turn's band, and routing's view of it.
func (t *Turn) classified(band turns.Band) {
	t.band = band
	t.route.Interactive = band == turns.Interactive
	t.route.Band = band.String()
}

// withPriority is body as ep is sent it: with the turn's band as its
// priority when ep's engine schedules by priority (pools.PoolConfig.
// PriorityScheduling), lower first as vLLM reads it (and SGLang with
// --schedule-low-priority-values-first):
// interactive 0, standard 1, background 2, in place of a priority the
// client sent. A body that is not a JSON object goes as it is, for the
// engine to refuse.
func (t *Turn) withPriority(ep *pools.Endpoint, body []byte) []byte {
	if !ep.Prioritizes() || !t.band.Valid() || len(body) == 0 {
		return body
	}
	b, err := jsonscan.Edit(body, []jsonscan.Member{{Key: "priority", Value: strconv.AppendInt(nil, int64(t.band.Priority()), 10)}})
	if err != nil {
		return body
	}
	return b
}

// candidates keeps of eps, in place, the endpoints the turn may be sent
// to. A turn flow control granted on a lent pool's room goes to a lent
// pool's endpoint while one is available, and to any endpoint once none
// is (its pool reclaimed: the turn is retried or moved elsewhere); any
// other turn goes to a lent pool only when it may (lent). Of several
// revisions, only the session's are kept (keepRevision).
func (t *Turn) candidates(eps []*pools.Endpoint) []*pools.Endpoint {
	if t.onLent {
		eps = pools.PreferLent(eps)
	} else {
		eps = pools.KeepAdmitting(eps, t.lent)
	}
	return t.keepRevision(eps)
}

// engineHeader is what the engine is told besides the body: the client's
// routing hints and its request id.
func engineHeader(spec *Spec) http.Header {
	var h http.Header
	for _, k := range hintHeaders {
		if v := spec.ClientHeader.Get(k); v != "" {
			if h == nil {
				h = http.Header{}
			}
			h.Set(k, v)
		}
	}
	return h
}

// without removes ep from eps in place.
func without(eps []*pools.Endpoint, ep *pools.Endpoint) []*pools.Endpoint {
	for i, e := range eps {
		if e == ep {
			return append(eps[:i], eps[i+1:]...)
		}
	}
	return eps
}

func (d *Dispatcher) modelNotFound(model string) error {
	return ModelNotFound(model)
}

// ModelNotFound is ErrModelNotFound naming model, for a layer above that
// finds it first.
func ModelNotFound(model string) error {
	return &modelError{model: model}
}

// modelError is ErrModelNotFound naming the model.
type modelError struct{ model string }

func (e *modelError) Error() string {
	return fmt.Sprintf("%v: the model '%s' does not exist or is not served here", ErrModelNotFound, e.model)
}

func (e *modelError) Is(target error) bool { return target == ErrModelNotFound }
