package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/internal/jsonscan"
	"github.com/turnpike-gateway/turnpike/internal/lru"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/turns"
)

// Defaults of HandOffConfig.
const (
	// DefaultWarmUpTokensPerSecond is the warm-ups' budget: prompt tokens
	// a second that the fleet prefills for sessions handed over, at most
	// as much again in a burst. About what one replica of a 7-8B model
	// prefills in a few hundred milliseconds.
	DefaultWarmUpTokensPerSecond = 50_000
	// DefaultWarmUpConcurrency is how many warm-ups of one hand-off run
	// at once.
	DefaultWarmUpConcurrency = 4
	// DefaultLastPromptBytes bounds the memory kept of sessions' last
	// prompts, which the warm-ups send again.
	DefaultLastPromptBytes = 64 << 20
)

// HandOffConfig is routing.handOff: what happens to the sessions pinned to
// an endpoint that starts to drain (drained through the admin API, or
// leaving the fleet as discovery removes it). Each is re-pinned at once
// to the endpoint the routing policy would choose for its next turn, given
// its last prompt's blocks in the KV-cache index; and, unless disabled,
// that endpoint is warmed: sent the session's last prompt as a
// prefill-only request (max_tokens 1, background priority), when it has
// slack, within a budget of tokens a second, so that the next turn finds
// its prefix cached; a decoder of a disaggregated model as a P/D pair,
// its prefill leg on a prefiller of a compatible revision.
type HandOffConfig struct {
	// DisableWarmUp sends no warm-ups (the sessions are still re-pinned)
	// and keeps no prompt bodies. Default false: warm-ups on.
	DisableWarmUp bool `yaml:"disableWarmUp" json:"disableWarmUp"`
	// WarmUpTokensPerSecond is the warm-ups' budget, in prompt tokens not
	// cached at their endpoint a second, with a burst of as much again;
	// a warm-up past it is skipped. Default 50000.
	WarmUpTokensPerSecond float64 `yaml:"warmUpTokensPerSecond" json:"warmUpTokensPerSecond"`
	// WarmUpConcurrency is how many warm-ups of one hand-off run at once.
	// Default 4.
	WarmUpConcurrency int `yaml:"warmUpConcurrency" json:"warmUpConcurrency"`
	// LastPromptBytes bounds the memory kept of the sessions' last
	// prompts, in bytes: beyond it the least recently served sessions'
	// go, and those sessions are re-pinned at their next turn instead.
	// Default 64 MiB.
	LastPromptBytes int64 `yaml:"lastPromptBytes" json:"lastPromptBytes"`
}

// EnsureDefaults fills zero fields with their defaults.
func (c *HandOffConfig) EnsureDefaults() {
	if c.WarmUpTokensPerSecond == 0 {
		c.WarmUpTokensPerSecond = DefaultWarmUpTokensPerSecond
	}
	if c.WarmUpConcurrency == 0 {
		c.WarmUpConcurrency = DefaultWarmUpConcurrency
	}
	if c.LastPromptBytes == 0 {
		c.LastPromptBytes = DefaultLastPromptBytes
	}
}

// Validate reports every problem at once.
func (c *HandOffConfig) Validate() error {
	var errs []error
	if c.WarmUpTokensPerSecond < 0 {
		errs = append(errs, fmt.Errorf("dispatch: handOff.warmUpTokensPerSecond %v is negative", c.WarmUpTokensPerSecond))
	}
	if c.WarmUpConcurrency < 0 {
		errs = append(errs, fmt.Errorf("dispatch: handOff.warmUpConcurrency %d is negative", c.WarmUpConcurrency))
	}
	if c.LastPromptBytes < 0 {
		errs = append(errs, fmt.Errorf("dispatch: handOff.lastPromptBytes %d is negative", c.LastPromptBytes))
	}
	return errors.Join(errs...)
}

// lastPrompt is what a session's last answered turn sent: its blocks, to
// find where its next turn is best served, and its engine body, to warm
// that endpoint. Immutable once kept.
type lastPrompt struct {
	tenant, key  string
	model, path  string
	endpoint     string
	body         []byte // nil when warm-ups are off
	hashes       []kv.BlockHash
	promptTokens int
}

// lastPrompts keeps the last prompt of each session, bounded in bytes,
// the least recently served going first.
type lastPrompts struct {
	keepBody bool
	mu       struct {
		sync.Mutex
		// protects the fields below
		c *lru.Cache[[2]string, *lastPrompt]
	}
}

func newLastPrompts(maxBytes int64, keepBody bool) *lastPrompts {
	l := &lastPrompts{keepBody: keepBody}
	l.mu.c = lru.NewCache(maxBytes, func(_ [2]string, p *lastPrompt) int64 {
		return int64(len(p.body)+8*len(p.hashes)+len(p.tenant)+len(p.key)+len(p.model)+len(p.path)+len(p.endpoint)) + 128
	})
	return l
}

// keep records the turn's prompt as its session's last: the turn was
// answered whole by t.ep.
func (l *lastPrompts) keep(t *Turn) {
	p := &lastPrompt{
		tenant: t.spec.Tenant, key: t.sessionKey, model: t.spec.Model, path: t.spec.Path,
		endpoint: t.ep.ID, hashes: slices.Clone(t.route.Hashes), promptTokens: t.route.PromptTokens,
	}
	if l.keepBody {
		p.body = slices.Clone(t.spec.Body)
	}
	l.mu.Lock()
	l.mu.c.Add([2]string{p.tenant, p.key}, p)
	l.mu.Unlock()
}

// servedBy returns the last prompts of the sessions last served by
// endpointID, the most recently served first.
func (l *lastPrompts) servedBy(endpointID string) []*lastPrompt {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*lastPrompt
	for _, p := range l.mu.c.All() {
		if p.endpoint == endpointID {
			out = append(out, p)
		}
	}
	return out
}

// maxHandedOff bounds the sessions handed over whose next turn is awaited
// (handedOff): beyond it a hand-off's next turn goes unmeasured.
const maxHandedOff = 100_000

// handedOff are the sessions handed over whose next turn has not come,
// each with when and whether its endpoint was warmed: that turn's TTFT is
// measured apart. n lets the turns of a fleet with none skip the lock.
type handedOff struct {
	n  atomic.Int64
	mu struct {
		sync.Mutex
		// protects the field below
		m map[[2]string]handOffMark
	}
}

// handOffMark is a session's hand-off awaiting its next turn.
type handOffMark struct {
	at     time.Time
	warmed bool
}

// mark notes that tenant's session key was handed over at.
func (h *handedOff) mark(tenant, key string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.m == nil {
		h.mu.m = map[[2]string]handOffMark{}
	}
	k := [2]string{tenant, key}
	if _, ok := h.mu.m[k]; !ok && len(h.mu.m) >= maxHandedOff {
		return
	}
	h.mu.m[k] = handOffMark{at: at}
	h.n.Store(int64(len(h.mu.m)))
}

// warmed notes that tenant's session key, handed over, was warmed,
// unless its next turn has come already.
func (h *handedOff) warmed(tenant, key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := [2]string{tenant, key}
	if m, ok := h.mu.m[k]; ok {
		m.warmed = true
		h.mu.m[k] = m
	}
}

// take reports whether tenant's session key was handed over before
// started, a turn's start, and not seen since, and whether it was warmed;
// it is seen from now on. A turn that started before the hand-off (it was
// routed to the endpoint that then drained) is not its next: the mark
// stays for the turn that follows.
func (h *handedOff) take(tenant, key string, started time.Time) (handed, warmed bool) {
	if h.n.Load() == 0 {
		return false, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := [2]string{tenant, key}
	m, ok := h.mu.m[k]
	if !ok || started.Before(m.at) {
		return false, false
	}
	delete(h.mu.m, k)
	h.n.Store(int64(len(h.mu.m)))
	return true, m.warmed
}

// tokenBucket is the warm-ups' budget: rate tokens a second, up to burst
// saved. A take may overdraw it once it holds anything, so that a prompt
// longer than the burst is not refused forever; the debt is repaid before
// the next. Over any span T, what is taken is at most burst + rate×T plus
// one take.
type tokenBucket struct {
	rate, burst float64
	now         func() time.Time
	mu          struct {
		sync.Mutex
		// protects the fields below
		level float64
		at    time.Time
	}
}

func newTokenBucket(rate, burst float64, now func() time.Time) *tokenBucket {
	b := &tokenBucket{rate: rate, burst: burst, now: now}
	b.mu.level, b.mu.at = burst, now()
	return b
}

// take spends n tokens and reports true, or reports false, spending
// nothing, when the bucket is empty or in debt.
func (b *tokenBucket) take(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if dt := now.Sub(b.mu.at).Seconds(); dt > 0 {
		b.mu.level = min(b.burst, b.mu.level+dt*b.rate)
	}
	b.mu.at = now
	if b.mu.level <= 0 {
		return false
	}
	b.mu.level -= float64(n)
	return true
}

// HandOffReport is what one hand-off did.
type HandOffReport struct {
	// Sessions is how many sessions were pinned to the endpoint and known
	// by their last prompt; HandedOff how many of them were re-pinned.
	Sessions, HandedOff int
	// WarmUps counts the warm-ups by result (WarmUpSent, WarmUpBudget…).
	WarmUps map[string]int
}

// HandOff hands over the sessions pinned to from, an endpoint that has
// started to drain: each session this gateway knows the last prompt of is
// re-pinned to the endpoint the policy chooses for its next turn among
// the others serving its model (of the revision the session is assigned,
// when the model has a revision policy), and that endpoint is warmed with the prompt
// unless HandOffConfig.DisableWarmUp. Sessions it does not know re-pin at
// their next turn. It returns when every warm-up has ended or ctx has.
// The registry calls it (pools.Registry.OnDrain); it is safe to call from
// several goroutines.
func (d *Dispatcher) HandOff(ctx context.Context, from *pools.Endpoint) HandOffReport {
	rep := HandOffReport{WarmUps: map[string]int{}}
	if d.sessions == nil || d.last == nil {
		return rep
	}
	type warm struct {
		p      *lastPrompt
		to     *pools.Endpoint
		cached int
	}
	var warms []warm
	var pinned []*lastPrompt
	for _, p := range d.last.servedBy(from.ID) {
		if id, _ := d.sessions.Pinned(p.tenant, p.key, time.Now()); id == from.ID {
			pinned = append(pinned, p) // not moved already, nor forgotten
		}
	}
	assigned := map[*pools.Endpoint]int{}
	for _, p := range pinned {
		now := time.Now()
		rep.Sessions++
		to, cached, err := d.handOffTarget(ctx, p, from, assigned, len(pinned))
		if err != nil {
			d.log.Debug("session not handed over", "endpoint", from.ID, "err", err)
			continue
		}
		assigned[to]++
		// A failed write of the pin is counted by the store; routing goes on.
		_ = d.sessions.Pin(ctx, p.tenant, p.key, to.ID, cached, sessions.PinHandOff, now)
		d.revm.handOffs.WithLabelValues(to.Revision()).Inc()
		d.handed.mark(p.tenant, p.key, now)
		rep.HandedOff++
		if d.warmUps != nil && p.body != nil {
			warms = append(warms, warm{p, to, cached})
		}
	}
	if len(warms) == 0 {
		return rep
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, d.handOff.WarmUpConcurrency)
	)
	for _, w := range warms {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			result := d.warmUp(ctx, w.p, w.to, w.cached)
			d.revm.warmUps.WithLabelValues(w.to.Revision(), result).Inc()
			if result == WarmUpSent || result == WarmUpCached {
				d.handed.warmed(w.p.tenant, w.p.key)
			}
			mu.Lock()
			rep.WarmUps[result]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	d.log.Info("sessions handed over", "endpoint", from.ID, "sessions", rep.Sessions, "handed_over", rep.HandedOff, "warm_ups", rep.WarmUps[WarmUpSent])
	return rep
}

// handOffTarget is the endpoint p's session's next turn is best served
// by, other than from, and how many blocks of its prompt it holds; of n
// sessions handed over at once, assigned counts those each endpoint was
// given so far. The policy weighs prefix and load, but the hand-off moves
// no load until the sessions' next turns come: to keep all n from landing
// on the endpoint that looked best before any moved, an endpoint takes at
// most its share of them (n over the candidates, rounded up), and the
// policy's next choice takes the rest.
func (d *Dispatcher) handOffTarget(ctx context.Context, p *lastPrompt, from *pools.Endpoint, assigned map[*pools.Endpoint]int, n int) (*pools.Endpoint, int, error) {
	var buf [16]*pools.Endpoint
	eps := without(pools.KeepAdmitting(d.reg.EndpointsFor(buf[:0], p.model), false), from)
	if len(eps) == 0 {
		return nil, 0, ErrNoEndpoint
	}
	if _, ok := d.revisions.Policy(p.model); ok {
		// Its pin is going: under weights or a preferred revision, the
		// session is assigned its revision anew (by its key, the one it
		// had). Without, it goes wherever it is served best: to the
		// newest revision alone, the sessions of every replica replaced
		// would pile onto the first new one.
		eps = d.revisions.Keep(p.model, p.key, nil, eps)
	}
	req := affinity.Request{
		Model: p.model, Tenant: p.tenant, SessionKey: p.key,
		PromptTokens: p.promptTokens, Hashes: p.hashes, Band: turns.Standard.String(),
	}
	share := (n + len(eps) - 1) / len(eps)
	for {
		ep, cached, err := affinity.Choose(ctx, d.policy, &req, eps)
		if err != nil || assigned[ep] < share {
			return ep, cached, err
		}
		rest := without(eps, ep)
		if len(rest) == 0 || len(rest) == len(eps) {
			return ep, cached, nil
		}
		eps = rest
	}
}

// warmUp sends p's prompt to ep as a prefill-only request, when ep has
// slack and the budget allows, and says what became of it. A decoder of a
// disaggregated model is warmed as a P/D pair, as the decider would serve
// the turn: a prefiller of a compatible revision prefills the prompt and
// ep pulls its KV, so that both hold the prefix; the decoder prefills it
// itself only where the decider would have it do so (no compatible
// prefiller, or too little uncached).
func (d *Dispatcher) warmUp(ctx context.Context, p *lastPrompt, ep *pools.Endpoint, cached int) string {
	uncached := p.promptTokens - cached*d.hasher.BlockTokens()
	if uncached <= 0 {
		return WarmUpCached
	}
	now := time.Now()
	if !ep.Available() || ep.EngineQueue(now) > 0 {
		return WarmUpBusy
	}
	req := affinity.Request{
		Model: p.model, Tenant: p.tenant, SessionKey: p.key, PromptTokens: p.promptTokens,
		ExpectedOutputTokens: 1, Hashes: p.hashes, Band: turns.Background.String(),
	}
	prefillers := d.warmUpPrefillers(p, ep, uncached)
	var prefiller *pools.Endpoint
	if len(prefillers) > 0 {
		preq := req
		preq.SessionKey, preq.Prefill = "", true
		pf, err := d.policy.Pick(ctx, &preq, prefillers)
		if err != nil || pf.EngineQueue(now) > 0 {
			if err == nil {
				d.policy.Done(&preq, pf, affinity.Outcome{Err: errWarmUpSkipped})
			}
			return WarmUpBusy
		}
		prefiller = pf
		defer func() { d.policy.Done(&preq, pf, affinity.Outcome{}) }()
	}
	if !d.warmUps.take(uncached) {
		return WarmUpBudget
	}
	header := http.Header{"X-Request-Id": {newRequestID()}}
	var params json.RawMessage
	if prefiller != nil {
		leg, err := prefillBody(p.body)
		if err == nil {
			leg, err = warmUpBody(leg, prefiller, prefillParams)
		}
		if err == nil {
			params, _, err = d.prefillOn(ctx, prefiller, p.path, leg, header, int64(p.promptTokens+1))
		}
		if err != nil {
			d.log.Debug("warm-up's prefill leg failed", "prefiller", prefiller.ID, "err", err)
			return WarmUpFailed
		}
		d.revm.prefillLeg(prefiller, ep)
	}
	body, err := warmUpBody(p.body, ep, params)
	if err != nil {
		return WarmUpFailed
	}
	// Routed as a background turn of the session on ep alone: the policy
	// records the prompt on ep ahead of the engine, as for any turn, and
	// takes it back if the engine fails.
	if _, err := d.policy.Pick(ctx, &req, []*pools.Endpoint{ep}); err != nil {
		return WarmUpBusy
	}
	resp, err := d.reg.Client().Send(ctx, ep, p.path, body, header, int64(p.promptTokens+1))
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerBytes))
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			err = fmt.Errorf("dispatch: warm-up answered %d", resp.StatusCode)
		}
	}
	d.policy.Done(&req, ep, affinity.Outcome{Err: err})
	if err != nil {
		d.log.Debug("warm-up failed", "endpoint", ep.ID, "err", err)
		return WarmUpFailed
	}
	return WarmUpSent
}

// errWarmUpSkipped is the outcome routing hears of a prefiller picked for
// a warm-up that was then not sent.
var errWarmUpSkipped = errors.New("dispatch: warm-up skipped")

// warmUpPrefillers are the prefillers a warm-up of p on ep, a decoder
// when p's model is disaggregated, runs its prefill leg on: those of ep's protocol
// (vLLM's: SGLang's bootstrap pairs are not warmed apart) and of a
// revision compatible with ep's, when the decider would disaggregate a
// turn with uncached tokens not held at ep. None: ep prefills itself.
func (d *Dispatcher) warmUpPrefillers(p *lastPrompt, ep *pools.Endpoint, uncached int) []*pools.Endpoint {
	if !d.pdModels[p.model] || pdFlavor(ep) != pdVLLM {
		return nil
	}
	var buf [16]*pools.Endpoint
	n, incompatible := 0, 0
	prefillers := d.reg.PrefillEndpointsFor(buf[:0], p.model)
	for _, pf := range prefillers {
		switch {
		case pdFlavor(pf) != pdVLLM || !pf.Available():
		case !d.pd.Compatible(pf.Revision(), ep.Revision()):
			incompatible++
		default:
			prefillers[n] = pf
			n++
		}
	}
	prefillers = prefillers[:n]
	if !d.pd.Decide(p.promptTokens, p.promptTokens-uncached, n, incompatible).Disaggregate {
		return nil
	}
	return slices.Clone(prefillers)
}

// warmUpBody is body as a prefill-only request: one token, not streamed,
// of background priority where ep's engine schedules by priority; with
// params as its kv_transfer_params (a P/D leg), or none.
func warmUpBody(body []byte, ep *pools.Endpoint, params json.RawMessage) ([]byte, error) {
	one := []byte("1")
	set := []jsonscan.Member{
		{Key: "stream", Value: []byte("false")},
		{Key: "max_tokens", Value: one},
		{Key: "max_completion_tokens", Value: one, Replace: true},
		{Key: "n", Value: one, Replace: true},
	}
	if ep.Prioritizes() {
		set = append(set, jsonscan.Member{Key: "priority", Value: strconv.AppendInt(nil, int64(turns.Background.Priority()), 10)})
	}
	if params != nil {
		return jsonscan.Edit(body, append(set, jsonscan.Member{Key: "kv_transfer_params", Value: params}), "stream_options")
	}
	return jsonscan.Edit(body, set, "stream_options", "kv_transfer_params")
}

// handOffTurnEnded measures the answered turn t of a session handed over,
// the first since.
func (d *Dispatcher) handOffTurnEnded(t *Turn, o *affinity.Outcome) {
	if handed, warmed := d.handed.take(t.spec.Tenant, t.sessionKey, t.start); handed && o.TTFT > 0 {
		d.revm.nextTurn.WithLabelValues(strconv.FormatBool(warmed)).Observe(o.TTFT.Seconds())
	}
}

// initHandOff sets up the revisions, their metrics, the last prompts and
// the warm-up budget from opts.
func (d *Dispatcher) initHandOff(opts Options) error {
	d.revisions, d.revm = opts.Revisions, newRevisionMetrics()
	if d.revisions == nil {
		d.revisions, _ = affinity.NewRevisions(nil)
	}
	if opts.HandOff != nil {
		d.handOff = *opts.HandOff
	}
	d.handOff.EnsureDefaults()
	if err := d.handOff.Validate(); err != nil {
		return err
	}
	if d.sessions == nil {
		return nil
	}
	warm := !d.handOff.DisableWarmUp && d.handOff.WarmUpTokensPerSecond > 0
	d.last = newLastPrompts(d.handOff.LastPromptBytes, warm)
	if warm {
		r := d.handOff.WarmUpTokensPerSecond
		d.warmUps = newTokenBucket(r, r, time.Now)
	}
	return nil
}
