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

	"github.com/prometheus/client_golang/prometheus"
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
	// DefaultHandOffMaxWait bounds how long a session handed over keeps
	// going to the draining endpoint while its new one is warmed: about
	// what a few cold prefills of long agentic prompts take at once.
	DefaultHandOffMaxWait = 5 * time.Second
)

// HandOffConfig is routing.handOff: what happens to the sessions pinned to
// an endpoint that starts to drain (drained through the admin API, or
// leaving the fleet as discovery removes it). Each is handed to the
// endpoint the routing policy would choose for its next turn, given its
// last prompt's blocks in the KV-cache index. Unless warm-ups are
// disabled, that endpoint is first warmed: sent the session's last prompt
// as a prefill-only request (max_tokens 1, background priority), within a
// budget of tokens a second, so that the next turn finds its prefix
// cached; a decoder of a disaggregated model as a P/D pair, its prefill
// leg on a prefiller of a compatible revision; then again with what its
// turns added meanwhile, their answers included. Make before break: until
// the warm-ups of the sessions handed to its new endpoint's revision have
// ended (or MaxWait has passed) the session's turns still go to the
// draining endpoint, which serves them from its cache; then it is
// re-pinned. Without warm-ups it is re-pinned at once.
type HandOffConfig struct {
	// DisableWarmUp sends no warm-ups (the sessions are still re-pinned)
	// and keeps no prompt bodies. Default false: warm-ups on.
	DisableWarmUp bool `yaml:"disableWarmUp" json:"disableWarmUp"`
	// WarmUpTokensPerSecond is the warm-ups' budget, in prompt tokens not
	// cached at their endpoint a second, with a burst of as much again;
	// a warm-up past it waits for it while its session can wait (MaxWait
	// from the hand-off's start), and is skipped after. Default 50000.
	WarmUpTokensPerSecond float64 `yaml:"warmUpTokensPerSecond" json:"warmUpTokensPerSecond"`
	// WarmUpConcurrency is how many sessions of one hand-off are warmed at
	// once, each with its warm-up and catch-ups in a row; the last
	// catch-ups of a group done (each short: what a session's turns added
	// while the others were warmed) run together. Default 4.
	WarmUpConcurrency int `yaml:"warmUpConcurrency" json:"warmUpConcurrency"`
	// LastPromptBytes bounds the memory kept of the sessions' last
	// prompts, in bytes: beyond it the least recently served sessions'
	// go, and those sessions are re-pinned at their next turn instead.
	// Default 64 MiB.
	LastPromptBytes int64 `yaml:"lastPromptBytes" json:"lastPromptBytes"`
	// MaxWait bounds how long a session handed over keeps going to the
	// draining endpoint while its new endpoint is warmed: past it the
	// session is re-pinned, its warm-up still running. The draining
	// endpoint must keep serving that long (a pod's termination grace
	// period). Default 5s.
	MaxWait time.Duration `yaml:"maxWait" json:"maxWait"`
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
	if c.MaxWait == 0 {
		c.MaxWait = DefaultHandOffMaxWait
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
	if c.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("dispatch: handOff.maxWait %v is negative", c.MaxWait))
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

// keep records p as its session's last prompt.
func (l *lastPrompts) keep(p *lastPrompt) {
	l.mu.Lock()
	l.mu.c.Add([2]string{p.tenant, p.key}, p)
	l.mu.Unlock()
}

// lastPrompt is what t, answered whole by t.ep, leaves for a hand-off of
// its session to send again: its prompt, and, when t went to the
// draining endpoint its session stayed on, the answer too (withAnswer),
// so that a catch-up warms the session's new endpoint with everything the
// draining one holds and the session's next turn finds only its own new
// messages uncached there, as it would have on the endpoint it leaves.
// Other turns' answers are not kept: reading one costs a JSON decode a
// streamed token.
func (d *Dispatcher) lastPrompt(t *Turn) *lastPrompt {
	p := &lastPrompt{
		tenant: t.spec.Tenant, key: t.sessionKey, model: t.spec.Model, path: t.spec.Path,
		endpoint: t.ep.ID, hashes: slices.Clone(t.route.Hashes), promptTokens: t.route.PromptTokens,
	}
	if !d.last.keepBody {
		return p
	}
	p.body = t.spec.Body
	if !t.spec.BodyImmutable {
		p.body = slices.Clone(p.body)
	}
	if !t.stayed {
		return p
	}
	text, err := generatedText(&t.sent, t.spec.Path)
	if err != nil || text == "" {
		return p // a tool call, reasoning: the prompt alone is warmed
	}
	set, err := withAnswer(t.spec, text)
	if err != nil {
		return p
	}
	body, err := jsonscan.Edit(t.spec.Body, set)
	if err != nil {
		return p
	}
	p.body = body
	tok := d.Tokenizer(t.spec.Model)
	if len(t.tokens) == 0 || len(p.hashes) == 0 {
		p.promptTokens += tok.Count(text)
		return p
	}
	// The answer's tokens follow the prompt's, which end with the
	// generation prompt the final message continues; the chain goes on
	// from the prompt's last full block.
	tokens := tok.Encode(slices.Clip(t.tokens), text)
	if n := len(p.hashes); n*d.hasher.BlockTokens() <= len(t.tokens) {
		p.hashes = d.hasher.HashTokensFrom(p.hashes, p.hashes[n-1], tokens[n*d.hasher.BlockTokens():])
	}
	p.promptTokens = len(tokens)
	return p
}

// get is the last prompt of tenant's session key, or nil.
func (l *lastPrompts) get(tenant, key string) *lastPrompt {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, _ := l.mu.c.Peek([2]string{tenant, key})
	return p
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
// measured apart; and the sessions whose hand-off waits for its warm-up,
// each with the draining endpoint their turns still go to. n and nStay
// let the turns of a fleet with none skip the lock.
type handedOff struct {
	n, nStay atomic.Int64
	// after is time.After, or a test's clock for HandOffConfig.MaxWait.
	after func(time.Duration) <-chan time.Time
	mu    struct {
		sync.Mutex
		// protects the fields below
		m    map[[2]string]handOffMark
		stay map[[2]string]*stay
	}
}

// handOffMark is a session's hand-off awaiting its next turn: when, to
// which endpoint, and the prompt that endpoint was last warmed with, if
// it was.
type handOffMark struct {
	at     time.Time
	warmed bool
	to     *pools.Endpoint
	p      *lastPrompt
}

// stay is a session whose turns go to from, draining, until it moves:
// moving once its re-pin has begun.
type stay struct {
	from   *pools.Endpoint
	moving bool
}

// stayOn notes that tenant's session key keeps going to from until moved.
func (h *handedOff) stayOn(tenant, key string, from *pools.Endpoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.stay == nil {
		h.mu.stay = map[[2]string]*stay{}
	}
	h.mu.stay[[2]string{tenant, key}] = &stay{from: from}
	h.nStay.Store(int64(len(h.mu.stay)))
}

// isStaying reports whether tenant's session key still stays, not
// claimed to move.
func (h *handedOff) isStaying(tenant, key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.mu.stay[[2]string{tenant, key}]
	return ok && !s.moving
}

// stayingOn is the draining endpoint tenant's session key still goes to,
// or nil.
func (h *handedOff) stayingOn(tenant, key string) *pools.Endpoint {
	if h.nStay.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.mu.stay[[2]string{tenant, key}]; ok {
		return s.from
	}
	return nil
}

// claim reports whether the caller is the one to move tenant's session
// key, staying: the warm-up's end or MaxWait, whichever comes first.
func (h *handedOff) claim(tenant, key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.mu.stay[[2]string{tenant, key}]
	if !ok || s.moving {
		return false
	}
	s.moving = true
	return true
}

// staying counts the sessions whose hand-off waits for its warm-up.
func (h *handedOff) staying() int { return int(h.nStay.Load()) }

// mark notes that p's session was handed over to to at, warmed with p
// or not; it no longer stays where it was. Its next turn is the first
// that starts after.
func (h *handedOff) mark(p *lastPrompt, to *pools.Endpoint, at time.Time, warmed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := [2]string{p.tenant, p.key}
	if _, ok := h.mu.stay[k]; ok {
		delete(h.mu.stay, k)
		h.nStay.Store(int64(len(h.mu.stay)))
	}
	if h.mu.m == nil {
		h.mu.m = map[[2]string]handOffMark{}
	}
	if _, ok := h.mu.m[k]; !ok && len(h.mu.m) >= maxHandedOff {
		return
	}
	h.mu.m[k] = handOffMark{at: at, warmed: warmed, to: to, p: p}
	h.n.Store(int64(len(h.mu.m)))
}

// catchUp reports the endpoint p's session was handed over to, warmed,
// and how many blocks of p it holds, when p is newer than what it was
// warmed with and the session's next turn has not started: p is then
// what it is warmed with.
func (h *handedOff) catchUp(p *lastPrompt) (*pools.Endpoint, int, bool) {
	if h.n.Load() == 0 {
		return nil, 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := [2]string{p.tenant, p.key}
	m, ok := h.mu.m[k]
	if !ok || !m.warmed || m.p == nil || m.p == p || p.promptTokens <= m.p.promptTokens || m.to.ID == p.endpoint {
		return nil, 0, false
	}
	cached := commonPrefix(m.p.hashes, p.hashes)
	m.p = p
	h.mu.m[k] = m
	return m.to, cached, true
}

// commonPrefix is how many leading hashes a and b share.
func commonPrefix(a, b []kv.BlockHash) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
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

// take spends n tokens and returns 0, or, the bucket being empty or in
// debt, spends nothing and returns how long until it holds some again.
func (b *tokenBucket) take(n int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if dt := now.Sub(b.mu.at).Seconds(); dt > 0 {
		b.mu.level = min(b.burst, b.mu.level+dt*b.rate)
	}
	b.mu.at = now
	if b.mu.level <= 0 {
		// At least a millisecond: a level of exactly 0 holds nothing.
		return max(time.Duration(-b.mu.level/b.rate*float64(time.Second)), time.Millisecond)
	}
	b.mu.level -= float64(n)
	return 0
}

// awaitBudget spends n tokens of the warm-up budget, waiting for them
// while they would come before until (never, when it is zero): the
// session waits on its draining endpoint meanwhile, so a warm-up that
// starts late is still worth more than none. It reports false when they
// would not come in time, or ctx ended.
func (d *Dispatcher) awaitBudget(ctx context.Context, n int, until time.Time) bool {
	for {
		wait := d.warmUps.take(n)
		if wait == 0 {
			return true
		}
		if until.IsZero() || time.Now().Add(wait).After(until) {
			return false
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false
		}
	}
}

// HandOffReport is what one hand-off did.
type HandOffReport struct {
	// Sessions is how many sessions were pinned to the endpoint and known
	// by their last prompt; HandedOff how many of them were re-pinned.
	Sessions, HandedOff int
	// WarmUps counts the warm-ups by result (WarmUpSent, WarmUpBudget…),
	// catch-ups included: a session warmed again with the prompt its
	// turns on the draining endpoint grew to meanwhile.
	WarmUps map[string]int
}

// HandOff hands over the sessions pinned to from, an endpoint that has
// started to drain: for each session this gateway knows the last prompt
// of, the policy chooses the endpoint for its next turn among the others
// serving its model (of the revision the session is assigned, when the
// model has a revision policy). Unless HandOffConfig.DisableWarmUp, that
// endpoint is warmed with the prompt first, then again with what the
// session's turns added meanwhile, their answers included (up to
// warmUpRounds in a row), and until the warm-ups of the sessions handed to
// endpoints of its new endpoint's revision have all ended, or
// HandOffConfig.MaxWait passes, the session's turns still go to from,
// which holds its prefix; then it is re-pinned, after one more catch-up
// when its turns went on meanwhile. Without warm-ups it is re-pinned at
// once.
// Sessions it does not know re-pin at their next turn. It returns when
// every warm-up has ended or ctx has. The registry calls
// it (pools.Registry.OnDrain); it is safe to call from several
// goroutines.
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
		rep.Sessions++
		to, cached, err := d.handOffTarget(ctx, p, from, assigned, len(pinned))
		if err != nil {
			d.log.Debug("session not handed over", "endpoint", from.ID, "err", err)
			continue
		}
		assigned[to]++
		rep.HandedOff++
		if d.warmUps != nil && p.body != nil {
			// Make before break: its turns stay on from until warmed.
			d.handed.stayOn(p.tenant, p.key, from)
			warms = append(warms, warm{p, to, cached})
			continue
		}
		d.repin(ctx, p, to, cached, false)
	}
	if len(warms) == 0 {
		return rep
	}
	// Warm-ups wait for the budget while their sessions may wait.
	until := time.Now().Add(d.handOff.MaxWait)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	first := slices.Clone(warms) // warms changes with the catch-ups
	go func() {
		// Past MaxWait, the sessions still staying move, unwarmed.
		select {
		case <-d.handed.after(d.handOff.MaxWait):
		case <-wctx.Done():
			if ctx.Err() == nil {
				return
			}
		}
		for _, w := range first {
			if d.handed.claim(w.p.tenant, w.p.key) {
				d.repin(ctx, w.p, w.to, w.cached, false)
			}
		}
	}()
	// The sessions move in groups, those handed to endpoints of one
	// revision together, once every warm-up of the group has ended: their
	// next turns then find their new endpoints warm and no longer busy
	// with each other's warm-ups (a P/D decoder's run on the revision's
	// prefillers), while a group that is done need not wait for another,
	// nor its agents' sessions end on the draining endpoint meanwhile.
	var mu sync.Mutex // guards rep.WarmUps, warmed and pending
	warmUp := func(p *lastPrompt, to *pools.Endpoint, cached int) string {
		result := d.warmUp(ctx, p, to, cached, until)
		d.revm.warmUps.WithLabelValues(to.Revision(), result).Inc()
		mu.Lock()
		rep.WarmUps[result]++
		mu.Unlock()
		return result
	}
	warmed := make([]bool, len(warms))
	pending := map[string]int{}
	for _, w := range warms {
		pending[w.to.Revision()]++
	}
	// A session whose turns went on while the rest of its group was
	// warmed gets a last catch-up first, alone, and moves once it ends:
	// its next turn then finds no more uncached than a turn on the
	// draining endpoint would have.
	var last sync.WaitGroup
	move := func(rev string) {
		for i := range warms {
			w := &warms[i]
			if w.to.Revision() != rev {
				continue
			}
			if cur := d.grown(w.p); warmed[i] && cur != nil {
				last.Go(func() {
					result := warmUp(cur, w.to, w.cached)
					p, cached := w.p, w.cached
					if warmedBy(result) {
						p, cached = cur, len(cur.hashes)
					}
					if d.handed.claim(p.tenant, p.key) {
						d.repin(context.WithoutCancel(ctx), p, w.to, cached, true)
					}
				})
				continue
			}
			if d.handed.claim(w.p.tenant, w.p.key) {
				d.repin(context.WithoutCancel(ctx), w.p, w.to, w.cached, warmed[i])
			}
		}
	}
	d.warmEach(ctx, len(warms), func(i int) {
		w := &warms[i]
		for range warmUpRounds {
			if !warmedBy(warmUp(w.p, w.to, w.cached)) {
				break
			}
			mu.Lock()
			warmed[i], w.cached = true, len(w.p.hashes)
			mu.Unlock()
			// Catch-up: the session's turns went on on from meanwhile,
			// its prompt grew; still staying, it is warmed again with its
			// latest, now mostly cached there, as a live migration copies
			// again what changed during its last copy.
			cur := d.grown(w.p)
			if cur == nil {
				break
			}
			mu.Lock()
			w.p = cur
			mu.Unlock()
		}
		mu.Lock()
		pending[w.to.Revision()]--
		done := pending[w.to.Revision()] == 0
		mu.Unlock()
		if done {
			mu.Lock()
			defer mu.Unlock()
			move(w.to.Revision())
		}
	})
	last.Wait()
	// Those whose warm-up never started, ctx having ended, move unwarmed.
	for _, w := range warms {
		if d.handed.claim(w.p.tenant, w.p.key) {
			d.repin(context.WithoutCancel(ctx), w.p, w.to, w.cached, false)
		}
	}
	d.log.Info("sessions handed over", "endpoint", from.ID, "sessions", rep.Sessions, "handed_over", rep.HandedOff, "warm_ups", rep.WarmUps[WarmUpSent])
	return rep
}

// warmUpRounds bounds the warm-ups of one session in a row: the first, and
// catch-ups of what its turns added meanwhile (one more may follow when its
// group is done, and one after it moved, of the answer of a turn that
// stayed).
const warmUpRounds = 3

// warmedBy reports whether a warm-up that ended in result left its
// endpoint holding the prompt.
func warmedBy(result string) bool { return result == WarmUpSent || result == WarmUpCached }

// warmEach runs warm(i) for each i below n, HandOffConfig.WarmUpConcurrency
// at once, until ctx ends, and waits for them.
func (d *Dispatcher) warmEach(ctx context.Context, n int, warm func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, d.handOff.WarmUpConcurrency)
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			warm(i)
		})
	}
	wg.Wait()
}

// grown is p's session's last prompt when its turns on the draining
// endpoint it still stays on have grown it past p, else nil: what a
// catch-up warms next.
func (d *Dispatcher) grown(p *lastPrompt) *lastPrompt {
	cur := d.last.get(p.tenant, p.key)
	if cur == nil || cur == p || cur.body == nil || cur.promptTokens <= p.promptTokens || !d.handed.isStaying(p.tenant, p.key) {
		return nil
	}
	return cur
}

// HandOffsPending counts the sessions handed over whose turns still go
// to the endpoint that drains, their new endpoint being warmed: that
// endpoint must keep serving until none is left (at most
// HandOffConfig.MaxWait after it started to drain).
func (d *Dispatcher) HandOffsPending() int { return d.handed.staying() }

// repin moves p's session to to, which holds cached blocks of its last
// prompt, warmed or not, and counts the hand-off; its next turn is the
// first that starts after.
func (d *Dispatcher) repin(ctx context.Context, p *lastPrompt, to *pools.Endpoint, cached int, warmed bool) {
	now := time.Now()
	// A failed write of the pin is counted by the store; routing goes on.
	_ = d.sessions.Pin(ctx, p.tenant, p.key, to.ID, cached, sessions.PinHandOff, now)
	d.revm.handOffs.WithLabelValues(to.Revision()).Inc()
	d.handed.mark(p, to, now, warmed)
	if cur := d.last.get(p.tenant, p.key); cur != nil && cur != p {
		// A turn that stayed ended after the last catch-up began.
		d.catchUpMoved(cur)
	}
}

// catchUpMoved warms, in the background, the endpoint p's session was
// handed over to with p, the last prompt (and answer) of a turn that
// stayed on the draining endpoint and ended once the session had moved:
// its next turn, which an agent sends a moment later, then finds
// everything cached that it would have found where the session was.
func (d *Dispatcher) catchUpMoved(p *lastPrompt) {
	if d.warmUps == nil || p.body == nil {
		return
	}
	to, cached, ok := d.handed.catchUp(p)
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d.handOff.MaxWait)
		defer cancel()
		result := d.warmUp(ctx, p, to, cached, time.Time{})
		d.revm.warmUps.WithLabelValues(to.Revision(), result).Inc()
	}()
}

// stayingOn is the draining endpoint t's session still goes to while its
// hand-off's warm-up runs, or nil (none, or one that does not serve the
// turn's model): the turn is sent there as it is, not picked by the
// policy, which would choose no draining endpoint.
func (t *Turn) stayingOn() *pools.Endpoint {
	if t.sessionKey == "" {
		return nil
	}
	if ep := t.d.handed.stayingOn(t.spec.Tenant, t.sessionKey); ep != nil && ep.Serves(t.spec.Model) {
		return ep
	}
	return nil
}

// stayCached is how many tokens of t's prompt ep, the draining endpoint
// its session stays on, holds, picked by no policy: as many as the
// session's last prompt (and answer) there shares with it.
func (t *Turn) stayCached(ep *pools.Endpoint) int {
	p := t.d.last.get(t.spec.Tenant, t.sessionKey)
	if p == nil || p.endpoint != ep.ID {
		return 0
	}
	if len(p.hashes) > 0 && len(t.route.Hashes) > 0 {
		return min(commonPrefix(p.hashes, t.route.Hashes)*t.d.hasher.BlockTokens(), t.route.PromptTokens)
	}
	return 0
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

// warmUp sends p's prompt to ep as a prefill-only request, when ep is
// available and the budget allows, and says what became of it. It does
// not wait for slack: the session waits for it on the draining endpoint,
// and a new endpoint is cold because no session is there yet. A decoder of a
// disaggregated model is warmed as a P/D pair, as the decider would serve
// the turn: a prefiller of a compatible revision prefills the prompt and
// ep pulls its KV, so that both hold the prefix; the decoder prefills it
// itself only where the decider would have it do so (no compatible
// prefiller, or too little uncached).
func (d *Dispatcher) warmUp(ctx context.Context, p *lastPrompt, ep *pools.Endpoint, cached int, until time.Time) string {
	uncached := p.promptTokens - cached*d.hasher.BlockTokens()
	if uncached <= 0 {
		return WarmUpCached
	}
	if !ep.Available() {
		return WarmUpBusy
	}
	if !d.awaitBudget(ctx, uncached, until) {
		return WarmUpBudget
	}
	req := affinity.Request{
		Model: p.model, Tenant: p.tenant, PromptTokens: p.promptTokens,
		ExpectedOutputTokens: 1, Hashes: p.hashes, Band: turns.Background.String(),
	}
	prefillers := d.warmUpPrefillers(p, ep, uncached)
	var prefiller *pools.Endpoint
	if len(prefillers) > 0 {
		preq := req
		preq.Prefill = true
		pf, err := d.policy.Pick(ctx, &preq, prefillers)
		if err != nil {
			return WarmUpBusy
		}
		prefiller = pf
		defer func() { d.policy.Done(&preq, pf, affinity.Outcome{}) }()
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
	// Routed as a background turn on ep alone: the policy records the
	// prompt on ep ahead of the engine, as for any turn, and takes it back
	// if the engine fails. Without the session's key: it is re-pinned
	// when the warm-up ends (repin), not when it starts.
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
	// Not the prefillers' queues: a warm-up is background work that the
	// prefiller should hold too, for the session's next prefill leg.
	if !d.pd.Decide(p.promptTokens, p.promptTokens-uncached, n, incompatible, 0).Disaggregate {
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
		if t.pd == nil {
			d.log.Debug("a handed-over session's next turn", "endpoint", t.ep.ID, "revision", t.ep.Revision(), "warmed", warmed, "ttft", o.TTFT, "prompt_tokens", o.PromptTokens, "cached_tokens", o.CachedTokens)
			return
		}
		// A P/D pair: the decoder pulled the prompt; the prefiller's cache
		// and the prefill leg's time say where the first token waited.
		d.log.Debug("a handed-over session's next turn", "endpoint", t.ep.ID, "revision", t.ep.Revision(), "warmed", warmed, "ttft", o.TTFT, "prompt_tokens", o.PromptTokens,
			"prefiller", t.pd.prefiller.ID, "prefiller_cached_tokens", t.pd.cached, "prefill", t.pd.prefilled.Sub(t.start))
	}
}

// initHandOff sets up the revisions, their metrics, the last prompts and
// the warm-up budget from opts.
func (d *Dispatcher) initHandOff(opts Options) error {
	d.revisions, d.revm = opts.Revisions, newRevisionMetrics()
	d.revm.pending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "turnpike_session_handoffs_pending",
		Help: "Sessions handed over whose turns still go to the draining endpoint they were pinned to, until their new endpoint's warm-up ends or routing.handOff.maxWait passes: a draining endpoint must keep serving until none is left.",
	}, func() float64 { return float64(d.handed.staying()) })
	if d.revisions == nil {
		d.revisions, _ = affinity.NewRevisions(nil)
	}
	if opts.HandOff != nil {
		d.handOff = *opts.HandOff
	}
	d.handOff.EnsureDefaults()
	d.handed.after = time.After
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
