package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/prompt"
	"github.com/turnpike-gateway/turnpike/sessions"
)

// handOffFixture is a cache-aware dispatcher, with sessions and a KV-cache
// index, over simulated engines of the given revisions.
type handOffFixture struct {
	d       *Dispatcher
	reg     *pools.Registry
	sess    *sessions.Store
	engines map[string]*simEngine // by endpoint ID
	metrics *prometheus.Registry
}

func newHandOffFixture(t *testing.T, revisions []string, ho HandOffConfig) *handOffFixture {
	t.Helper()
	f := &handOffFixture{engines: map[string]*simEngine{}, metrics: prometheus.NewRegistry()}
	pc := pools.PoolConfig{Name: "p", ServedModels: []string{testModel}}
	var engines []*simEngine
	for _, rev := range revisions {
		e := newSimEngine(t, sim.Config{})
		engines = append(engines, e)
		pc.Endpoints = append(pc.Endpoints, pools.EndpointConfig{URL: e.URL, Revision: rev})
	}
	log := slog.New(slog.DiscardHandler)
	reg, err := pools.NewRegistry([]pools.PoolConfig{pc}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range reg.Endpoints() {
		// Fresh for the test's span, with room for 64 sequences: slack.
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour), MaxNumSeqs: 64})
		ep.SetJoined(time.Unix(int64(i), 0))
		f.engines[ep.ID] = engines[i]
	}
	f.reg = reg
	if f.sess, err = sessions.NewStore(sessions.Options{}); err != nil {
		t.Fatal(err)
	}
	hasher := &kv.Hasher{}
	policy, err := affinity.NewPolicy(affinity.Config{}, affinity.Deps{Index: kv.NewIndex(kv.IndexOptions{}), Hasher: hasher, Sessions: f.sess})
	if err != nil {
		t.Fatal(err)
	}
	f.d, err = New(Options{Registry: reg, Policy: policy, Sessions: f.sess, Hasher: hasher, Logger: log, Metrics: f.metrics, HandOff: &ho})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// turn runs one whole streamed turn of session key with content and
// returns the endpoint that answered and the engine's cached tokens.
func (f *handOffFixture) turn(t *testing.T, key, content string) (*pools.Endpoint, int) {
	t.Helper()
	ep, u, _ := sessionTurn(t, f.d, key, content)
	return ep, u.PromptTokensDetails.CachedTokens
}

// sessionTurn runs one whole streamed turn of session key with content on
// d and returns the endpoint that answered, the usage and the answer.
func sessionTurn(t *testing.T, d *Dispatcher, key, content string) (*pools.Endpoint, Usage, string) {
	t.Helper()
	tr, err := d.Begin(t.Context(), sessionSpec(key, content))
	if err != nil {
		t.Fatal(err)
	}
	ep := tr.Endpoint()
	text, u := readTurn(t, tr, true)
	tr.End(nil)
	return ep, u, text
}

// sessionSpec is a streamed turn of session key with content.
func sessionSpec(key, content string) *Spec {
	m, _ := json.Marshal(content)
	return &Spec{
		Tenant: "acme", Model: testModel, Path: chatPath,
		Body:         fmt.Appendf(nil, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":4,"messages":[{"role":"user","content":%s}]}`, m),
		ClientHeader: http.Header{"X-Session-Id": {key}},
		Prompt:       &prompt.Prompt{Model: testModel, Messages: []prompt.Message{{Role: "user", Content: content}}},
	}
}

// warmUps are the requests ep's engine got with max_tokens 1, not streamed.
func (f *handOffFixture) warmUps(ep *pools.Endpoint) int {
	n := 0
	for _, l := range f.engines[ep.ID].received() {
		if string(l.body["max_tokens"]) == "1" && string(l.body["stream"]) == "false" {
			n++
		}
	}
	return n
}

// TestHandOff: an endpoint that drains hands its sessions over: each is
// re-pinned at once to the endpoint its next turn goes to, counted; with
// warm-ups that endpoint is sent the session's last prompt, one token, not
// streamed, and the next turn finds it cached; without, it starts cold.
func TestHandOff(t *testing.T) {
	content := longPrompt(7, 1500)
	for _, tc := range []struct {
		name   string
		ho     HandOffConfig
		warmed bool
	}{
		{"warm-up", HandOffConfig{}, true},
		{"no warm-up", HandOffConfig{DisableWarmUp: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHandOffFixture(t, []string{"r1", "r1", "r1"}, tc.ho)
			from, _ := f.turn(t, "s1", content)
			if id, _ := f.sess.Pinned("acme", "s1", time.Now()); id != from.ID {
				t.Fatalf("pinned to %q, want %s", id, from.ID)
			}
			from.SetDraining(true)
			rep := f.d.HandOff(t.Context(), from)
			if rep.Sessions != 1 || rep.HandedOff != 1 {
				t.Fatalf("hand-off %+v, want the one session handed over", rep)
			}
			to, _ := f.sess.Pinned("acme", "s1", time.Now())
			if to == "" || to == from.ID {
				t.Fatalf("pinned to %q after the hand-off", to)
			}
			if n := testutil.ToFloat64(f.d.revm.handOffs.WithLabelValues("r1")); n != 1 {
				t.Errorf("%v hand-offs counted, want 1", n)
			}
			toEP, _ := f.reg.Endpoint(to)
			wantWarm := 0
			if tc.warmed {
				wantWarm = 1
			}
			if n := f.warmUps(toEP); n != wantWarm || rep.WarmUps[WarmUpSent] != wantWarm {
				t.Errorf("%d warm-ups sent to %s (report %v), want %d", n, to, rep.WarmUps, wantWarm)
			}
			next, cached := f.turn(t, "s1", content+" and one more thing")
			if next.ID != to {
				t.Errorf("the next turn went to %s, not %s it was handed to", next.ID, to)
			}
			if tc.warmed && cached < 1000 {
				t.Errorf("the next turn found %d tokens cached after the warm-up, want its prompt's", cached)
			}
			if !tc.warmed && cached != 0 {
				t.Errorf("the next turn found %d tokens cached without a warm-up", cached)
			}
			if n := testutil.CollectAndCount(f.d.revm.nextTurn); n != 1 {
				t.Errorf("%d series of the next turn's TTFT, want the one of warmed=%v", n, tc.warmed)
			}
		})
	}
}

// TestHandOffRevision: under a revision policy, a handed-over session goes
// to the revision a new session would; a session pinned elsewhere stays.
func TestHandOffRevision(t *testing.T) {
	f := newHandOffFixture(t, []string{"old", "old", "new"}, HandOffConfig{DisableWarmUp: true})
	oldEPs := f.reg.Endpoints()[:2]
	newEP := f.reg.Endpoints()[2]
	// Sessions pinned to the old revision before the new one came.
	for i, ep := range oldEPs {
		_ = f.sess.Pin(t.Context(), "acme", fmt.Sprint("old-", i), ep.ID, 0, sessions.PinNew, time.Now())
	}
	// A pinned session stays on its endpoint's revision.
	for i, ep := range oldEPs {
		got, _ := f.turn(t, fmt.Sprint("old-", i), longPrompt(i, 300))
		if got.Revision() != "old" {
			t.Errorf("session pinned to %s went to %s of revision %s", ep.ID, got.ID, got.Revision())
		}
	}
	// A new session goes to the newest revision.
	if got, _ := f.turn(t, "fresh", longPrompt(9, 300)); got != newEP {
		t.Errorf("a new session went to %s (%s), want the newest revision's %s", got.ID, got.Revision(), newEP.ID)
	}
	if err := f.d.Revisions().Set(testModel, affinity.RevisionPolicy{Prefer: "new"}); err != nil {
		t.Fatal(err)
	}
	from, _ := f.reg.Endpoint(mustPinned(t, f, "old-0"))
	from.SetDraining(true)
	f.d.HandOff(t.Context(), from)
	if got := mustPinned(t, f, "old-0"); got != newEP.ID {
		t.Errorf("handed over to %s, want the preferred revision's %s", got, newEP.ID)
	}
	if got := mustPinned(t, f, "old-1"); got != oldEPs[1].ID {
		t.Errorf("a session of another endpoint moved to %s", got)
	}
}

func mustPinned(t *testing.T, f *handOffFixture, key string) string {
	t.Helper()
	return mustPinnedIn(t, f.sess, key)
}

// TestHandedOffNextTurn: the turn measured as a hand-off's next is the
// first that started after it; one routed before (to the endpoint that
// then drained) leaves the mark for the one that follows.
func TestHandedOffNextTurn(t *testing.T) {
	var h handedOff
	at := time.Unix(100, 0)
	h.mark(&lastPrompt{tenant: "acme", key: "s1"}, nil, at, true)
	if handed, _ := h.take("acme", "s1", at.Add(-time.Second)); handed {
		t.Error("a turn that started before the hand-off was taken as its next")
	}
	if handed, warmed := h.take("acme", "s1", at.Add(time.Second)); !handed || !warmed {
		t.Errorf("the next turn: handed %v, warmed %v; want both", handed, warmed)
	}
	if handed, _ := h.take("acme", "s1", at.Add(2*time.Second)); handed {
		t.Error("the turn after the next was taken too")
	}
}

// heldWarmUps makes ep's engine hold each warm-up it gets until release
// is closed, and says on arrived when one is held.
func (f *handOffFixture) heldWarmUps(ep *pools.Endpoint) (arrived <-chan struct{}, release chan struct{}) {
	return holdWarmUps(f.engines[ep.ID])
}

// holdWarmUps makes e hold each warm-up it gets until release is closed,
// and says on arrived when one is held.
func holdWarmUps(e *simEngine) (arrived <-chan struct{}, release chan struct{}) {
	a, release := make(chan struct{}, 16), make(chan struct{})
	e.mu.Lock()
	e.hold = func(l leg) {
		if string(l.body["max_tokens"]) == "1" {
			a <- struct{}{}
			<-release
		}
	}
	e.mu.Unlock()
	return a, release
}

// heldHandOff runs a turn of session s1 with content on the first of the
// fixture's two endpoints, then drains it and hands the session over to
// the second, whose warm-ups are held (heldWarmUps); it returns once the
// first has arrived there, with the hand-off's report to come on reps.
func (f *handOffFixture) heldHandOff(t *testing.T, content string) (from, to *pools.Endpoint, arrived <-chan struct{}, release chan struct{}, reps <-chan HandOffReport) {
	t.Helper()
	from, to = f.reg.Endpoints()[0], f.reg.Endpoints()[1]
	to.SetDraining(true) // the session on from
	f.turn(t, "s1", content)
	to.SetDraining(false)
	arrived, release = f.heldWarmUps(to)
	from.SetDraining(true)
	r := make(chan HandOffReport, 1)
	go func() { r <- f.d.HandOff(t.Context(), from) }()
	await(t, arrived, "the warm-up")
	return from, to, arrived, release, r
}

// await waits for ch, at most a minute.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s: not within a minute", what)
	}
	var zero T
	return zero
}

// TestHandOffMakeBeforeBreak: while the endpoint a session is handed to is
// warmed, the session's turns still go to the draining endpoint, which
// holds its prefix, and it counts as pending; once the warm-up has ended,
// and a second one has caught up with the prompt that turn grew to, it is
// re-pinned, and its next turn goes to the warmed endpoint, found cached,
// measured as warmed.
func TestHandOffMakeBeforeBreak(t *testing.T) {
	content := longPrompt(11, 1500)
	f := newHandOffFixture(t, []string{"r1", "r1"}, HandOffConfig{})
	from, to, _, release, reps := f.heldHandOff(t, content)
	if n, g := f.d.HandOffsPending(), testutil.ToFloat64(f.d.revm.pending); n != 1 || g != 1 {
		t.Errorf("%d hand-offs pending while the warm-up runs (gauge %v), want 1", n, g)
	}
	content += " and more"
	ep, u, answer := sessionTurn(t, f.d, "s1", content)
	if cached := u.PromptTokensDetails.CachedTokens; ep != from || cached < 1000 {
		t.Errorf("a turn during the warm-up went to %s, %d tokens cached; want the draining %s, its prefix cached", ep.ID, cached, from.ID)
	}
	if id := mustPinned(t, f, "s1"); id != from.ID {
		t.Errorf("pinned to %s during the warm-up, want %s still", id, from.ID)
	}
	close(release)
	rep := await(t, reps, "the hand-off")
	// Twice: the turn on from grew the prompt, caught up with before the
	// session moves.
	if rep.HandedOff != 1 || rep.WarmUps[WarmUpSent] != 2 {
		t.Fatalf("hand-off %+v, want the session handed over, warmed, and caught up with", rep)
	}
	if n := f.warmUps(to); n != 2 {
		t.Errorf("%s got %d warm-ups, want 2", to.ID, n)
	}
	// The catch-up carries the answer the draining endpoint gave the turn
	// that stayed, as the start of the assistant's message: the new
	// endpoint holds all that the draining one did.
	var catchUp leg
	for _, l := range f.engines[to.ID].received() {
		if string(l.body["max_tokens"]) == "1" {
			catchUp = l
		}
	}
	var msgs []prompt.Message
	if err := json.Unmarshal(catchUp.body["messages"], &msgs); err != nil || len(msgs) != 2 || msgs[1].Role != "assistant" || msgs[1].Content != answer ||
		string(catchUp.body["continue_final_message"]) != "true" || answer == "" {
		t.Errorf("the catch-up's messages %s (continue_final_message %s), want the turn's and its answer %q continued", catchUp.body["messages"], catchUp.body["continue_final_message"], answer)
	}
	if n, g := f.d.HandOffsPending(), testutil.ToFloat64(f.d.revm.pending); n != 0 || g != 0 {
		t.Errorf("%d hand-offs pending after the warm-up (gauge %v), want 0", n, g)
	}
	if id := mustPinned(t, f, "s1"); id != to.ID {
		t.Fatalf("pinned to %s after the warm-up, want %s", id, to.ID)
	}
	ep, cached := f.turn(t, "s1", content+" and one more thing")
	if ep != to || cached < 1000 {
		t.Errorf("the next turn went to %s, %d tokens cached; want the warmed %s, its prefix cached", ep.ID, cached, to.ID)
	}
	if c := testutil.CollectAndCount(f.d.revm.nextTurn); c != 1 || !f.d.revm.nextTurn.DeleteLabelValues("true") {
		t.Errorf("%d series of the next turn's TTFT, want warmed=true's alone", c)
	}
}

// TestHandOffCatchUpAfterMove: a turn that stayed on the draining
// endpoint and was still being answered when its session moved sends the
// new endpoint a catch-up of its prompt and answer once it ends, so that
// the session's next turn, which an agent sends a moment later, finds
// them cached there.
func TestHandOffCatchUpAfterMove(t *testing.T) {
	content := longPrompt(13, 1500)
	f := newHandOffFixture(t, []string{"r1", "r1"}, HandOffConfig{})
	from, to, arrived, release, reps := f.heldHandOff(t, content)
	content += " and more"
	tr, err := f.d.Begin(t.Context(), sessionSpec("s1", content))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Endpoint() != from {
		t.Errorf("a turn during the warm-up went to %s, want the draining %s", tr.Endpoint().ID, from.ID)
	}
	close(release)
	if rep := await(t, reps, "the hand-off"); rep.HandedOff != 1 || rep.WarmUps[WarmUpSent] != 1 {
		t.Fatalf("hand-off %+v, want the session handed over after one warm-up", rep)
	}
	if id := mustPinned(t, f, "s1"); id != to.ID {
		t.Fatalf("pinned to %s, want %s", id, to.ID)
	}
	answer, _ := readTurn(t, tr, true)
	tr.End(nil)
	await(t, arrived, "the catch-up after the move")
	legs := f.engines[to.ID].received()
	var msgs []prompt.Message
	if err := json.Unmarshal(legs[len(legs)-1].body["messages"], &msgs); err != nil || len(msgs) != 2 || msgs[0].Content != content || msgs[1].Content != answer {
		t.Errorf("the catch-up's messages %s, want the turn's and its answer %q", legs[len(legs)-1].body["messages"], answer)
	}
}

// TestHandOffMovesByRevision: the sessions handed to endpoints of one
// revision move together once their warm-ups have ended, without waiting
// for those of another revision, still being warmed.
func TestHandOffMovesByRevision(t *testing.T) {
	f := newHandOffFixture(t, []string{"r1", "r1", "r2"}, HandOffConfig{})
	from, a, b := f.reg.Endpoints()[0], f.reg.Endpoints()[1], f.reg.Endpoints()[2]
	a.SetDraining(true)
	b.SetDraining(true) // every session on from
	for i := range 2 {
		f.turn(t, fmt.Sprint("s", i), longPrompt(20+i, 1500))
	}
	a.SetDraining(false)
	b.SetDraining(false)
	arrived, release := f.heldWarmUps(b)
	from.SetDraining(true)
	reps := make(chan HandOffReport, 1)
	go func() { reps <- f.d.HandOff(t.Context(), from) }()
	await(t, arrived, "the warm-up of r2's endpoint")
	pinned := func() map[string]string {
		return map[string]string{"s0": mustPinned(t, f, "s0"), "s1": mustPinned(t, f, "s1")}
	}
	deadline := time.Now().Add(time.Minute)
	for p := pinned(); p["s0"] != a.ID && p["s1"] != a.ID; p = pinned() {
		if time.Now().After(deadline) {
			t.Fatalf("no session moved to %s while %s's warm-up was held: %v", a.ID, b.ID, p)
		}
		time.Sleep(time.Millisecond)
	}
	if p := pinned(); p["s0"] != from.ID && p["s1"] != from.ID || f.d.HandOffsPending() != 1 {
		t.Errorf("pinned %v, %d pending, while %s's warm-up is held; want one session still on %s", p, f.d.HandOffsPending(), b.ID, from.ID)
	}
	close(release)
	if rep := await(t, reps, "the hand-off"); rep.HandedOff != 2 {
		t.Fatalf("hand-off %+v, want 2 sessions handed over", rep)
	}
	if p := pinned(); p["s0"] == p["s1"] || p["s0"] == from.ID || p["s1"] == from.ID {
		t.Errorf("pinned %v, want one session on each of %s and %s", p, a.ID, b.ID)
	}
}

// TestHandOffMaxWait: a warm-up that outlasts routing.handOff.maxWait no
// longer holds its session: past it, the session is re-pinned and its
// turns go to the new endpoint, measured as not warmed.
func TestHandOffMaxWait(t *testing.T) {
	content := longPrompt(12, 1500)
	f := newHandOffFixture(t, []string{"r1", "r1"}, HandOffConfig{MaxWait: time.Hour})
	fire := make(chan time.Time)
	// The hand-off's timer starts beside the warm-ups, not before them.
	waited := make(chan time.Duration, 1)
	f.d.handed.after = func(d time.Duration) <-chan time.Time {
		waited <- d
		return fire
	}
	from, to := f.reg.Endpoints()[0], f.reg.Endpoints()[1]
	to.SetDraining(true)
	f.turn(t, "s1", content)
	to.SetDraining(false)
	arrived, release := f.heldWarmUps(to)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	from.SetDraining(true)
	reps := make(chan HandOffReport, 1)
	go func() { reps <- f.d.HandOff(t.Context(), from) }()
	await(t, arrived, "the warm-up")
	if got := await(t, waited, "the hand-off's timer"); got != time.Hour {
		t.Errorf("the hand-off waits %v at most, want maxWait's 1h", got)
	}
	if ep, _ := f.turn(t, "s1", content+" and more"); ep != from {
		t.Errorf("a turn before maxWait went to %s, want the draining %s", ep.ID, from.ID)
	}
	close(fire)
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		for f.d.HandOffsPending() != 0 && t.Context().Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}()
	await(t, moved, "the re-pin past maxWait")
	if id := mustPinned(t, f, "s1"); id != to.ID {
		t.Fatalf("pinned to %s past maxWait, want %s", id, to.ID)
	}
	if ep, _ := f.turn(t, "s1", content+" and more and more"); ep != to {
		t.Errorf("a turn past maxWait went to %s, want %s", ep.ID, to.ID)
	}
	close(release)
	if rep := await(t, reps, "the hand-off"); rep.HandedOff != 1 {
		t.Errorf("hand-off %+v, want the session handed over", rep)
	}
	if c := testutil.CollectAndCount(f.d.revm.nextTurn); c != 1 || !f.d.revm.nextTurn.DeleteLabelValues("false") {
		t.Errorf("%d series of the next turn's TTFT, want warmed=false's alone", c)
	}
}

// TestHandOffSpread: the sessions of one hand-off, none of whose prefix
// another endpoint holds, are spread over the candidates by count (two
// each over two), not all sent to the one that looked best before any
// of them moved.
func TestHandOffSpread(t *testing.T) {
	f := newHandOffFixture(t, []string{"r1", "r1", "r1"}, HandOffConfig{DisableWarmUp: true})
	eps := f.reg.Endpoints()
	eps[1].SetDraining(true) // every session on eps[0]
	eps[2].SetDraining(true)
	for i := range 4 {
		f.turn(t, fmt.Sprint("s", i), longPrompt(i, 300))
	}
	eps[1].SetDraining(false)
	eps[2].SetDraining(false)
	eps[0].SetDraining(true)
	if rep := f.d.HandOff(t.Context(), eps[0]); rep.HandedOff != 4 {
		t.Fatalf("hand-off %+v, want 4 sessions handed over", rep)
	}
	got := map[string]int{}
	for i := range 4 {
		got[mustPinned(t, f, fmt.Sprint("s", i))]++
	}
	if got[eps[1].ID] != 2 || got[eps[2].ID] != 2 {
		t.Errorf("sessions handed over per endpoint %v, want 2 on each of %s and %s", got, eps[1].ID, eps[2].ID)
	}
}

// TestHandOffWarmUpBudget: a warm-up past the budget of tokens a second
// waits for it while its session can wait on the draining endpoint
// (maxWait), and is skipped, and counted so, when the budget would not
// refill in time.
func TestHandOffWarmUpBudget(t *testing.T) {
	for _, tc := range []struct {
		name         string
		rate         float64
		maxWait      time.Duration
		sent, budget int
	}{
		// A full bucket of 100 takes one prompt of 800 tokens (the
		// overdraft, to -700), then none for 7 s.
		{"skipped", 100, time.Second, 1, 2},
		// A full bucket of 1000 takes one prompt of 800 tokens, and one
		// more (to -600), then none for 0.6 s, which the third waits.
		{"waits", 1000, time.Minute, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHandOffFixture(t, []string{"r1", "r1"}, HandOffConfig{WarmUpTokensPerSecond: tc.rate, WarmUpConcurrency: 1, MaxWait: tc.maxWait})
			from, other := f.reg.Endpoints()[0], f.reg.Endpoints()[1]
			other.SetDraining(true) // every session on from
			for i := range 3 {
				f.turn(t, fmt.Sprint("s", i), longPrompt(i, 800))
			}
			other.SetDraining(false)
			from.SetDraining(true)
			rep := f.d.HandOff(t.Context(), from)
			if rep.HandedOff != 3 || rep.WarmUps[WarmUpSent] != tc.sent || rep.WarmUps[WarmUpBudget] != tc.budget {
				t.Errorf("hand-off %+v, want 3 handed over, %d warm-ups sent, %d over budget", rep, tc.sent, tc.budget)
			}
		})
	}
}

// TestTokenBucket: the warm-up budget gives at most burst + rate×T (and
// one take's overdraft) over any span T, and refills with time.
func TestTokenBucket(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	b := newTokenBucket(1000, 1000, clock)
	steps := []struct {
		advance time.Duration
		take    int
		ok      bool
	}{
		{0, 800, true},                     // 1000 → 200
		{0, 800, true},                     // overdraws: 200 → -600
		{0, 1, false},                      // in debt
		{600 * time.Millisecond, 1, false}, // repaid to 0: still nothing
		{100 * time.Millisecond, 50, true}, // 100 → 50
		{time.Hour, 1, true},               // full again, not beyond burst
		{0, 999, true},                     // 999 → 0
		{0, 1, false},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		if got := b.take(s.take) == 0; got != s.ok {
			t.Fatalf("step %d: take(%d) = %v, want %v", i, s.take, got, s.ok)
		}
	}
	// In debt, it says how long until it is repaid.
	b = newTokenBucket(1000, 1000, clock)
	b.take(1600)
	if got := b.take(1); got != 600*time.Millisecond {
		t.Errorf("600 tokens in debt at 1000/s: wait %v, want 600ms", got)
	}
	// Over a long run of small takes the bucket gives at most burst +
	// rate×T + one take.
	b = newTokenBucket(1000, 1000, clock)
	taken := 0
	for range 10_000 {
		now = now.Add(time.Millisecond)
		if b.take(7) == 0 {
			taken += 7
		}
	}
	if max := 1000 + 1000*10 + 7; taken > max || taken < 10_000 {
		t.Errorf("took %d tokens in 10 s at 1000/s with a burst of 1000, want (10000, %d]", taken, max)
	}
}

// TestHandOffConcurrent: hand-offs of two endpoints at once, with turns
// running, hand every session over once.
func TestHandOffConcurrent(t *testing.T) {
	f := newHandOffFixture(t, []string{"r1", "r1", "r1", "r1"}, HandOffConfig{})
	eps := f.reg.Endpoints()
	eps[2].SetDraining(true) // every session on eps[0] or eps[1]
	eps[3].SetDraining(true)
	for i := range 8 {
		f.turn(t, fmt.Sprint("s", i), longPrompt(i, 200))
	}
	eps[2].SetDraining(false)
	eps[3].SetDraining(false)
	var wg sync.WaitGroup
	reports := make([]HandOffReport, 2)
	for i := range 2 {
		eps[i].SetDraining(true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			reports[i] = f.d.HandOff(context.Background(), eps[i])
		}()
	}
	wg.Wait()
	if n := reports[0].HandedOff + reports[1].HandedOff; n != 8 {
		t.Errorf("%d sessions handed over, want 8 (%+v)", n, reports)
	}
	for i := range 8 {
		if id := mustPinned(t, f, fmt.Sprint("s", i)); id == eps[0].ID || id == eps[1].ID {
			t.Errorf("session s%d still pinned to the draining %s", i, id)
		}
	}
}

// TestHandOffWarmUpPD: a decoder of a disaggregated model is warmed as a
// P/D pair, as the decider serves a turn: a prefiller of its revision
// prefills the session's last prompt and the decoder pulls the KV (one
// token, not streamed, both legs under one request id), so that the
// session's next turn finds its prefix at the decoder and needs no
// prefill leg.
func TestHandOffWarmUpPD(t *testing.T) {
	f, sess := newHandOffPDFixture(t)
	turn := func(content string) (*pools.Endpoint, Usage) {
		ep, u, _ := sessionTurn(t, f.d, "s1", content)
		return ep, u
	}
	content := longPrompt(3, 1500)
	from, _ := turn(content)
	prefills := len(f.prefill[0].received())
	if prefills != 1 {
		t.Fatalf("the first turn sent %d prefill legs, want 1", prefills)
	}
	from.SetDraining(true)
	rep := f.d.HandOff(t.Context(), from)
	if rep.HandedOff != 1 || rep.WarmUps[WarmUpSent] != 1 {
		t.Fatalf("hand-off %+v, want the session handed over and warmed", rep)
	}
	to := f.decodeEP[0]
	toEngine := f.decode[0]
	if to == from {
		to, toEngine = f.decodeEP[1], f.decode[1]
	}
	if id := mustPinnedIn(t, sess, "s1"); id != to.ID {
		t.Fatalf("handed over to %s, want the other decoder %s", id, to.ID)
	}
	pl := f.prefill[0].received()
	if len(pl) != prefills+1 {
		t.Fatalf("the warm-up sent %d prefill legs, want 1", len(pl)-prefills)
	}
	warm := pl[len(pl)-1]
	if !strings.Contains(string(warm.body["kv_transfer_params"]), `"do_remote_decode":true`) || string(warm.body["max_tokens"]) != "1" {
		t.Errorf("the warm-up's prefill leg %s", warm.body)
	}
	dl := toEngine.received()
	if len(dl) != 1 {
		t.Fatalf("the decoder handed to got %d requests, want the warm-up's decode leg", len(dl))
	}
	if d := dl[0]; !strings.Contains(string(d.body["kv_transfer_params"]), `"do_remote_prefill":true`) ||
		string(d.body["max_tokens"]) != "1" || string(d.body["stream"]) != "false" || d.requestID != warm.requestID {
		t.Errorf("the warm-up's decode leg %s (request id %q, the prefill leg's %q)", d.body, d.requestID, warm.requestID)
	}
	next, u := turn(content + " and one more thing")
	if next != to {
		t.Errorf("the next turn went to %s, not %s it was handed to", next.ID, to.ID)
	}
	if n := len(f.prefill[0].received()); n != prefills+1 {
		t.Errorf("the next turn sent a prefill leg; its decoder was warmed")
	}
	if u.PromptTokensDetails.CachedTokens < 1000 {
		t.Errorf("the next turn found %d tokens cached at its decoder, want its prefix's", u.PromptTokensDetails.CachedTokens)
	}
	if n := testutil.ToFloat64(f.d.revm.crossed); n != 0 {
		t.Errorf("%v legs across revisions", n)
	}
}

func mustPinnedIn(t *testing.T, s *sessions.Store, key string) string {
	t.Helper()
	id, _ := s.Pinned("acme", key, time.Now())
	if id == "" {
		t.Fatalf("session %s is not pinned", key)
	}
	return id
}

// newHandOffPDFixture is a P/D fleet of one prefiller and two decoders,
// routed by the cache-aware policy with sessions and warm-ups.
func newHandOffPDFixture(t *testing.T) (*pdFixture, *sessions.Store) {
	t.Helper()
	sess, err := sessions.NewStore(sessions.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hasher := &kv.Hasher{}
	f := newPDFixtureOf(t, pdFixtureConfig{prefillers: 1, decoders: 2,
		policy: func(*pools.Registry) affinity.Policy {
			p, err := affinity.NewPolicy(affinity.Config{}, affinity.Deps{Index: kv.NewIndex(kv.IndexOptions{}), Hasher: hasher, Sessions: sess})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		options: func(o *Options) { o.Sessions, o.Hasher, o.HandOff = sess, hasher, &HandOffConfig{} },
	})
	for _, ep := range append(slices.Clone(f.prefillEP), f.decodeEP...) {
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour), MaxNumSeqs: 64}) // slack
	}
	return f, sess
}

// TestHandOffStayingPD: a turn that stays on its session's draining
// decoder while the new one is warmed is decided as the pinned session's
// turn it is: the decoder holds the session's prompt, so a few new tokens
// are prefilled there, with no prefill leg.
func TestHandOffStayingPD(t *testing.T) {
	f, _ := newHandOffPDFixture(t)
	content := longPrompt(4, 1500)
	from, _, _ := sessionTurn(t, f.d, "s1", content)
	to := f.decode[0]
	if from == f.decodeEP[0] {
		to = f.decode[1]
	}
	arrived, release := holdWarmUps(to)
	from.SetDraining(true)
	reps := make(chan HandOffReport, 1)
	go func() { reps <- f.d.HandOff(t.Context(), from) }()
	await(t, arrived, "the warm-up's decode leg")
	prefills := len(f.prefill[0].received())
	if ep, _, _ := sessionTurn(t, f.d, "s1", content+" and more"); ep != from {
		t.Errorf("a turn during the warm-up went to %s, want the draining %s", ep.ID, from.ID)
	}
	if n := len(f.prefill[0].received()) - prefills; n != 0 {
		t.Errorf("the turn that stayed sent %d prefill legs, want none: its decoder holds all but a few tokens", n)
	}
	close(release)
	await(t, reps, "the hand-off")
}

// TestLastPromptKeepsTheBody: a session's last prompt, which a hand-off
// warms its new endpoint with, is the turn's body as it was sent: kept
// without a copy when the caller never writes it again (BodyImmutable),
// copied when its buffer is reused for another request.
func TestLastPromptKeepsTheBody(t *testing.T) {
	for _, immutable := range []bool{true, false} {
		t.Run(fmt.Sprintf("immutable=%v", immutable), func(t *testing.T) {
			f := newHandOffFixture(t, []string{"r1", "r1"}, HandOffConfig{})
			spec := sessionSpec("s1", longPrompt(3, 200))
			spec.BodyImmutable = immutable
			sent := slices.Clone(spec.Body)
			tr, err := f.d.Begin(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			readTurn(t, tr, true)
			tr.End(nil)
			p := f.d.last.get("acme", "s1")
			if p == nil {
				t.Fatal("no last prompt kept for the session")
			}
			if shared := &p.body[0] == &spec.Body[0]; shared != immutable {
				t.Errorf("the kept body shares the turn's buffer: %v, want %v", shared, immutable)
			}
			if !immutable {
				// The buffer goes to the next request.
				copy(spec.Body, strings.Repeat("x", len(spec.Body)))
			}
			if string(p.body) != string(sent) {
				t.Errorf("the kept body is not the one sent:\n got %.80s\nwant %.80s", p.body, sent)
			}
		})
	}
}
