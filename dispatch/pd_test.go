package dispatch

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
)

// leg is one request an engine received.
type leg struct {
	body      map[string]json.RawMessage
	requestID string
	// traceparent is the leg's trace context header, "" when untraced.
	traceparent string
}

// simEngine is a simulated engine behind a server that records the chat
// requests it is sent.
type simEngine struct {
	*httptest.Server
	eng  *sim.Engine
	mu   sync.Mutex
	legs []leg
	// hold, when set, is called with each request before it is served.
	hold func(leg)
}

func newSimEngine(t *testing.T, cfg sim.Config) *simEngine {
	t.Helper()
	cfg.ServedModelName = testModel
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &simEngine{eng: eng}
	h := eng.Handler()
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == chatPath || r.URL.Path == "/v1/completions" {
			b, _ := io.ReadAll(r.Body)
			var l leg
			json.Unmarshal(b, &l.body)
			l.requestID = r.Header.Get("X-Request-Id")
			l.traceparent = r.Header.Get("Traceparent")
			s.mu.Lock()
			s.legs = append(s.legs, l)
			hold := s.hold
			s.mu.Unlock()
			if hold != nil {
				hold(l)
			}
			r.Body = io.NopCloser(strings.NewReader(string(b)))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		s.Close()
		eng.Close()
	})
	return s
}

func (s *simEngine) received() []leg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]leg(nil), s.legs...)
}

type pdFixture struct {
	d                   *Dispatcher
	prefill, decode     []*simEngine
	metrics             *prometheus.Registry
	prefillEP, decodeEP []*pools.Endpoint
}

func newPDFixture(t *testing.T, prefillers, decoders int, pcfg sim.Config) *pdFixture {
	t.Helper()
	return newPDFixtureWith(t, prefillers, decoders, pcfg, func(*pools.Registry) affinity.Policy { return &affinity.RoundRobin{} })
}

func newPDFixtureWith(t *testing.T, prefillers, decoders int, pcfg sim.Config, policy func(*pools.Registry) affinity.Policy) *pdFixture {
	t.Helper()
	return newPDFixtureOf(t, pdFixtureConfig{prefillers: prefillers, decoders: decoders, sim: pcfg, policy: policy})
}

// pdFixtureConfig is a P/D fixture's fleet: its engines, the prefill
// engines' config, the policy, each pool's engine revision and the P/D
// config (default: threshold 256 tokens, 5 s prefill timeout).
type pdFixtureConfig struct {
	prefillers, decoders int
	sim                  sim.Config
	policy               func(*pools.Registry) affinity.Policy
	prefillRevision      string
	decodeRevision       string
	pd                   *affinity.PDConfig
	// options, when set, completes the dispatcher's options (sessions,
	// hand-offs).
	options func(*Options)
}

func newPDFixtureOf(t *testing.T, c pdFixtureConfig) *pdFixture {
	t.Helper()
	f := &pdFixture{metrics: prometheus.NewRegistry()}
	pool := func(name, role, revision string, n int, cfg sim.Config) ([]*simEngine, pools.PoolConfig) {
		pc := pools.PoolConfig{Name: name, Role: role, ServedModels: []string{testModel}, PriorityScheduling: cfg.SchedulingPolicy == sim.SchedulingPriority}
		var engines []*simEngine
		for range n {
			cfg.Role = role
			e := newSimEngine(t, cfg)
			engines = append(engines, e)
			pc.Endpoints = append(pc.Endpoints, pools.EndpointConfig{URL: e.URL, Revision: revision})
		}
		return engines, pc
	}
	var ppc, dpc pools.PoolConfig
	f.prefill, ppc = pool("prefill", pools.RolePrefill, c.prefillRevision, c.prefillers, c.sim)
	f.decode, dpc = pool("decode", pools.RoleDecode, c.decodeRevision, c.decoders, sim.Config{SchedulingPolicy: c.sim.SchedulingPolicy})
	reg, err := pools.NewRegistry([]pools.PoolConfig{ppc, dpc}, pools.Options{BreakerFailures: 3, BreakerOpenFor: time.Minute}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour)})
		if ep.Pool.Config.Role == pools.RolePrefill {
			f.prefillEP = append(f.prefillEP, ep)
		} else {
			f.decodeEP = append(f.decodeEP, ep)
		}
	}
	pd := affinity.PDConfig{UncachedTokens: 256, PrefillTimeout: 5 * time.Second}
	if c.pd != nil {
		pd = *c.pd
	}
	opts := Options{Registry: reg, Policy: c.policy(reg), Logger: slog.New(slog.DiscardHandler), Metrics: f.metrics, PD: &pd}
	if c.options != nil {
		c.options(&opts)
	}
	f.d, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func pdSpec(content string, stream bool, extra string) *Spec {
	m, _ := json.Marshal(content)
	return &Spec{
		Tenant: "acme", Model: testModel, Path: chatPath,
		Body:         []byte(fmt.Sprintf(`{"model":"m","stream":%t,"max_tokens":12,"ignore_eos":true,"messages":[{"role":"user","content":%s}]%s}`, stream, m, extra)),
		ClientHeader: http.Header{"X-Request-Id": {"req-pd"}},
		PromptTokens: sim.CountTokens(content),
	}
}

// longPrompt is content of about n tokens.
func longPrompt(seed, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < 4*n; i++ {
		fmt.Fprintf(&b, "w%d-%d ", seed, i)
	}
	return b.String()[:4*n]
}

// readTurn reads a turn's whole answer: the text and the usage.
func readTurn(t *testing.T, tr *Turn, stream bool) (string, Usage) {
	t.Helper()
	if stream {
		text, err := streamText(t, tr)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := tr.Usage()
		return text, u
	}
	b, err := tr.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage Usage `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if u, _ := tr.Usage(); u != v.Usage {
		t.Errorf("the body's usage %+v is not the turn's %+v", v.Usage, u)
	}
	return v.Choices[0].Message.Content, v.Usage
}

// TestPDTwoLegs: a long turn's prefill leg goes to a prefiller shaped as
// vLLM's proxy sends it; the decode leg carries the answered params
// verbatim with the same request id; the client gets the decoder's answer
// with the prefiller's cached tokens.
func TestPDTwoLegs(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := newPDFixture(t, 1, 1, sim.Config{})
			content := longPrompt(1, 2000)
			// The first turn warms the prefiller's cache; the second finds
			// it there.
			for turn := range 2 {
				extra := ""
				if stream {
					extra = `,"stream_options":{"include_usage":true}`
				}
				tr, err := f.d.Begin(t.Context(), pdSpec(content, stream, extra))
				if err != nil {
					t.Fatal(err)
				}
				if tr.Endpoint() != f.decodeEP[0] {
					t.Errorf("answered by %s, want the decoder", tr.Endpoint().ID)
				}
				text, u := readTurn(t, tr, stream)
				tr.End(nil)
				if u.CompletionTokens != 12 || len(text) == 0 {
					t.Errorf("turn %d: %q, usage %+v", turn, text, u)
				}
				if turn == 1 && u.PromptTokensDetails.CachedTokens < u.PromptTokens-32 {
					t.Errorf("turn 2: cached %d of %d: want the prefiller's cache hit", u.PromptTokensDetails.CachedTokens, u.PromptTokens)
				}
			}
			pl, dl := f.prefill[0].received(), f.decode[0].received()
			if len(pl) != 2 || len(dl) != 2 {
				t.Fatalf("%d prefill legs, %d decode legs: want 2 each", len(pl), len(dl))
			}
			p := pl[0].body
			var kvp map[string]any
			json.Unmarshal(p["kv_transfer_params"], &kvp)
			if kvp["do_remote_decode"] != true || kvp["do_remote_prefill"] != false || kvp["remote_engine_id"] != nil || kvp["remote_host"] != nil {
				t.Errorf("prefill leg's kv_transfer_params %s", p["kv_transfer_params"])
			}
			if string(p["stream"]) != "false" || string(p["max_tokens"]) != "1" || p["stream_options"] != nil || string(p["messages"]) != string(dl[0].body["messages"]) {
				t.Errorf("prefill leg: stream %s max_tokens %s stream_options %s", p["stream"], p["max_tokens"], p["stream_options"])
			}
			var dp sim.KVTransferParams
			if err := json.Unmarshal(dl[0].body["kv_transfer_params"], &dp); err != nil || !dp.DoRemotePrefill || dp.RemoteRequestID == nil || dp.RemoteHost == nil {
				t.Errorf("decode leg's kv_transfer_params %s (%v)", dl[0].body["kv_transfer_params"], err)
			}
			if string(dl[0].body["stream"]) != fmt.Sprint(stream) || string(dl[0].body["max_tokens"]) != "12" {
				t.Errorf("decode leg: stream %s max_tokens %s, want the client's", dl[0].body["stream"], dl[0].body["max_tokens"])
			}
			if pl[0].requestID != "req-pd" || dl[0].requestID != "req-pd" {
				t.Errorf("request ids: prefill %q decode %q, want the client's on both", pl[0].requestID, dl[0].requestID)
			}
			if n := testutil.ToFloat64(f.d.pdm.decisions.WithLabelValues(pdVLLM, affinity.PDDisaggregated)); n != 2 {
				t.Errorf("%v disaggregated decisions, want 2", n)
			}
			if n := testutil.CollectAndCount(f.d.pdm.prefillLeg); n != 1 {
				t.Errorf("prefill leg histogram: %d series", n)
			}
		})
	}
}

// TestPDShortPromptStaysOnDecoder: below the threshold the decoder serves
// the turn alone.
func TestPDShortPromptStaysOnDecoder(t *testing.T) {
	f := newPDFixture(t, 1, 1, sim.Config{})
	tr, err := f.d.Begin(t.Context(), pdSpec("a short question", false, ""))
	if err != nil {
		t.Fatal(err)
	}
	readTurn(t, tr, false)
	tr.End(nil)
	if n := len(f.prefill[0].received()); n != 0 {
		t.Errorf("%d prefill legs for a short prompt", n)
	}
	if dl := f.decode[0].received(); len(dl) != 1 || dl[0].body["kv_transfer_params"] != nil {
		t.Errorf("decode legs %+v: want the client's body alone", dl)
	}
	if n := testutil.ToFloat64(f.d.pdm.decisions.WithLabelValues(pdVLLM, affinity.PDCachedAtDecoder)); n != 1 {
		t.Errorf("%v below-threshold decisions", n)
	}
}

// TestPDPrefillQueueFull: while every prefiller already has
// routing.pd.maxPrefillQueue of the gateway's requests in flight (3 by
// default), a turn over the threshold is prefilled by its decoder rather
// than queued behind them, and the decision says why.
func TestPDPrefillQueueFull(t *testing.T) {
	f := newPDFixture(t, 1, 1, sim.Config{})
	arrived, release := holdWarmUps(f.prefill[0]) // prefill legs are max_tokens 1 too
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	content := longPrompt(30, 2000)
	done := make(chan struct{}, 3)
	for i := range 3 {
		go func() {
			defer func() { done <- struct{}{} }()
			tr, err := f.d.Begin(t.Context(), pdSpec(fmt.Sprint(i, content), false, ""))
			if err != nil {
				t.Error(err)
				return
			}
			readTurn(t, tr, false)
			tr.End(nil)
		}()
	}
	for range 3 {
		await(t, arrived, "a held prefill leg")
	}
	// Held behind the three, it would not end: awaited, it fails instead.
	fourth := make(chan error, 1)
	go func() {
		tr, err := f.d.Begin(t.Context(), pdSpec("3"+content, false, ""))
		if err == nil {
			_, err = tr.ReadAll()
			tr.End(err)
		}
		fourth <- err
	}()
	if err := await(t, fourth, "the fourth turn, on its decoder"); err != nil {
		t.Fatal(err)
	}
	if n := len(f.prefill[0].received()); n != 3 {
		t.Errorf("%d prefill legs, want the 3 held: the fourth turn prefilled on its decoder", n)
	}
	if n := testutil.ToFloat64(f.d.pdm.decisions.WithLabelValues(pdVLLM, affinity.PDPrefillQueueFull)); n != 1 {
		t.Errorf("%v prefill_queue_full decisions, want 1", n)
	}
	close(release)
	for range 3 {
		await(t, done, "a held turn")
	}
}

// TestPDWarmDecoderPrefillsItself: with the cache-aware policy, the next
// turn of a conversation goes to the decoder holding its prefix, and only
// the new tokens are uncached there: below the threshold, no prefill leg.
func TestPDWarmDecoderPrefillsItself(t *testing.T) {
	f := newPDFixtureWith(t, 1, 2, sim.Config{}, func(reg *pools.Registry) affinity.Policy {
		p, err := affinity.NewPolicy(affinity.Config{}, affinity.Deps{Index: kv.NewIndex(kv.IndexOptions{})})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
	history := longPrompt(5, 2000)
	turn := func(msgs []prompt.Message) *pools.Endpoint {
		spec := pdSpec(history, false, "")
		body, _ := json.Marshal(map[string]any{"model": testModel, "max_tokens": 12, "ignore_eos": true, "messages": msgs})
		spec.Body, spec.PromptTokens = body, 0
		spec.Prompt = &prompt.Prompt{Model: testModel, Messages: msgs}
		tr, err := f.d.Begin(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		ep := tr.Endpoint()
		readTurn(t, tr, false)
		tr.End(nil)
		return ep
	}
	first := []prompt.Message{{Role: "user", Content: history}}
	ep1 := turn(first)
	ep2 := turn(append(first, prompt.Message{Role: "assistant", Content: "ok"}, prompt.Message{Role: "user", Content: "and the tests?"}))
	if ep1 != ep2 {
		t.Errorf("second turn on %s, first on %s: want the decoder holding the prefix", ep2.ID, ep1.ID)
	}
	if n := len(f.prefill[0].received()); n != 1 {
		t.Errorf("%d prefill legs, want 1 (the cold first turn)", n)
	}
	if d, l := testutil.ToFloat64(f.d.pdm.decisions.WithLabelValues(pdVLLM, affinity.PDDisaggregated)), testutil.ToFloat64(f.d.pdm.decisions.WithLabelValues(pdVLLM, affinity.PDCachedAtDecoder)); d != 1 || l != 1 {
		t.Errorf("decisions: %v disaggregated, %v below threshold; want 1 and 1", d, l)
	}
}

// TestPDPrefillerDown: a prefiller that is gone costs the turn nothing
// but its prefill on the decoder.
func TestPDPrefillerDown(t *testing.T) {
	f := newPDFixture(t, 1, 1, sim.Config{})
	f.prefill[0].Close()
	answerTurns(t, f.d, longPrompt(2, 1000), false, true)
	if dl := f.decode[0].received(); len(dl) != 2 || dl[0].body["kv_transfer_params"] != nil {
		t.Errorf("decode legs: %d, first with params %s: want plain local prefills", len(dl), dl[0].body["kv_transfer_params"])
	}
	if n := testutil.ToFloat64(f.d.pdm.fallbacks.WithLabelValues(pdVLLM, pdFallbackPrefillFailed)); n != 2 {
		t.Errorf("%v prefill_failed fallbacks, want 2", n)
	}
}

// answerTurns runs a turn of content on d for each of streams (streamed
// or not) and checks each is answered.
func answerTurns(t *testing.T, d *Dispatcher, content string, streams ...bool) {
	t.Helper()
	for _, stream := range streams {
		tr, err := d.Begin(t.Context(), pdSpec(content, stream, ""))
		if err != nil {
			t.Fatal(err)
		}
		text, _ := readTurn(t, tr, stream)
		tr.End(nil)
		if text == "" {
			t.Error("no answer")
		}
	}
}

// TestPDExpiredLease: a decoder refusing params whose lease ran out
// prefills the turn itself.
func TestPDExpiredLease(t *testing.T) {
	f := newPDFixture(t, 1, 1, sim.Config{KVLease: time.Nanosecond})
	tr, err := f.d.Begin(t.Context(), pdSpec(longPrompt(3, 1000), true, `,"stream_options":{"include_usage":true}`))
	if err != nil {
		t.Fatal(err)
	}
	text, u := readTurn(t, tr, true)
	tr.End(nil)
	if text == "" || u.CompletionTokens != 12 {
		t.Errorf("answer %q usage %+v", text, u)
	}
	checkRefusedThenPlain(t, f.d, f.decode[0], pdVLLM, "kv_transfer_params")
}

// checkRefusedThenPlain checks that e was sent two decode legs, the
// first with field, which it refused, then the client's plain body, and
// that the refusal was counted.
func checkRefusedThenPlain(t *testing.T, d *Dispatcher, e *simEngine, flavor, field string) {
	t.Helper()
	dl := e.received()
	if len(dl) != 2 || dl[0].body[field] == nil || dl[1].body[field] != nil {
		t.Fatalf("decode legs %d: want the refused one with %s, then the plain one", len(dl), field)
	}
	if n := testutil.ToFloat64(d.pdm.fallbacks.WithLabelValues(flavor, pdFallbackKVRefused)); n != 1 {
		t.Errorf("%v kv_refused fallbacks, want 1", n)
	}
}

// TestPDDecoderDownBeforeFirstByte: the decode leg goes to another
// decoder with the same params, which pulls the KV.
func TestPDDecoderDownBeforeFirstByte(t *testing.T) {
	f := newPDFixture(t, 1, 2, sim.Config{})
	f.decode[0].Close()
	for range 2 { // round-robin tries the dead one at least once
		tr, err := f.d.Begin(t.Context(), pdSpec(longPrompt(4, 1000), false, ""))
		if err != nil {
			t.Fatal(err)
		}
		if tr.Endpoint() != f.decodeEP[1] {
			t.Errorf("answered by %s", tr.Endpoint().ID)
		}
		readTurn(t, tr, false)
		tr.End(nil)
	}
	for _, l := range f.decode[1].received() {
		if l.body["kv_transfer_params"] == nil {
			t.Error("a decode leg without params: the live decoder should have pulled")
		}
	}
	if n := testutil.ToFloat64(f.d.pdm.fallbacks.WithLabelValues(pdVLLM, pdFallbackKVRefused)); n != 0 {
		t.Errorf("%v kv_refused fallbacks", n)
	}
}

func TestPrefillBody(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":300,"messages":[]}`)
	b, err := prefillBody(body)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","stream":false,"max_completion_tokens":1,"messages":[],"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null},"max_tokens":1}`
	if string(b) != want {
		t.Errorf("prefill body\n%s\nwant\n%s", b, want)
	}
	params := json.RawMessage(`{"do_remote_prefill":true}`)
	for _, c := range []struct{ body, want string }{
		{`{"model":"m","messages":[]}` + "\n", `{"model":"m","messages":[],"kv_transfer_params":{"do_remote_prefill":true}}` + "\n"},
		{`{ }`, `{ "kv_transfer_params":{"do_remote_prefill":true}}`},
		{`{"kv_transfer_params":{"x":1},"model":"m"}`, `{"kv_transfer_params":{"do_remote_prefill":true},"model":"m"}`},
	} {
		got, err := decodeBody([]byte(c.body), params)
		if err != nil || string(got) != c.want {
			t.Errorf("decodeBody(%s) = %s, %v; want %s", c.body, got, err, c.want)
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal(got, &v); err != nil || string(v["kv_transfer_params"]) != string(params) {
			t.Errorf("decodeBody(%s) does not decode to the params: %s", c.body, got)
		}
	}
	for _, bad := range []string{`[]`, `null`, `{"a":`} {
		if _, err := prefillBody([]byte(bad)); err == nil {
			t.Errorf("prefillBody(%s): no error", bad)
		}
		if _, err := decodeBody([]byte(bad), params); err == nil {
			t.Errorf("decodeBody(%s): no error", bad)
		}
	}
}

// TestPDRevisions (issue 35): a prefill leg pairs only with a decoder of a
// compatible revision. With the prefiller on another revision the turn
// runs on the decoder alone, and the decision says why; with the two
// declared compatible, it is disaggregated.
func TestPDRevisions(t *testing.T) {
	roundRobin := func(*pools.Registry) affinity.Policy { return &affinity.RoundRobin{} }
	for _, tc := range []struct {
		name       string
		compatible [][]string
		reason     string
		prefills   int
	}{
		{"incompatible", nil, affinity.PDRevisionMismatch, 0},
		{"declared compatible", [][]string{{"r1", "r2"}}, affinity.PDDisaggregated, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pd := affinity.PDConfig{UncachedTokens: 256, PrefillTimeout: 5 * time.Second, CompatibleRevisions: tc.compatible}
			f := newPDFixtureOf(t, pdFixtureConfig{prefillers: 1, decoders: 1, policy: roundRobin,
				prefillRevision: "r1", decodeRevision: "r2", pd: &pd})
			if r := f.decodeEP[0].Revision(); r != "r2" {
				t.Fatalf("decoder revision %q, want the config's r2", r)
			}
			tr, err := f.d.Begin(t.Context(), pdSpec(longPrompt(1, 2000), false, ""))
			if err != nil {
				t.Fatal(err)
			}
			text, u := readTurn(t, tr, false)
			tr.End(nil)
			if len(text) == 0 || u.CompletionTokens != 12 {
				t.Errorf("answer %q, usage %+v", text, u)
			}
			if n := len(f.prefill[0].received()); n != tc.prefills {
				t.Errorf("%d prefill legs, want %d", n, tc.prefills)
			}
			if n := testutil.ToFloat64(f.d.pdm.decisions.WithLabelValues(pdVLLM, tc.reason)); n != 1 {
				t.Errorf("%v decisions %s, want 1", n, tc.reason)
			}
		})
	}
}

// FuzzPrefillAnswer: whatever a prefiller answers, reading it errs or
// yields params, never panics.
func FuzzPrefillAnswer(f *testing.F) {
	f.Add([]byte(`{"kv_transfer_params":{"do_remote_prefill":true},"usage":{"prompt_tokens":3}}`))
	f.Add([]byte(`{"kv_transfer_params":null}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(b) }))
		defer srv.Close()
		reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{testModel}, Endpoints: []pools.EndpointConfig{{URL: srv.URL}}}}, pools.Options{}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(Options{Registry: reg, Policy: &affinity.RoundRobin{}})
		if err != nil {
			t.Fatal(err)
		}
		tr := &Turn{d: d, spec: &Spec{Path: chatPath}}
		params, _, err := tr.prefillOn(t.Context(), reg.Endpoints()[0], []byte(`{}`), 1)
		if err == nil && len(params) == 0 {
			t.Fatal("no error and no params")
		}
	})
}

// BenchmarkPrefillLegBody: building a P/D turn's two bodies from an
// 8k-token chat request, once per disaggregated turn.
func BenchmarkPrefillLegBody(b *testing.B) {
	body := pdSpec(longPrompt(1, 8192), true, `,"stream_options":{"include_usage":true}`).Body
	params := json.RawMessage(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[1,2,3],"remote_engine_id":"e","remote_request_id":"r","remote_host":"h","remote_port":1,"tp_size":1}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := prefillBody(body); err != nil {
			b.Fatal(err)
		}
		if _, err := decodeBody(body, params); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPDUsageReportsPrefillerCache: a cold decoder pulls the whole prompt
// (it computes none, caches none); the client is told what the turn's
// prefill found cached, at the prefiller.
func TestPDUsageReportsPrefillerCache(t *testing.T) {
	// Three decoders: round-robin's counter also turns for the prefill
	// pick, so the second turn lands on another decoder.
	f := newPDFixture(t, 1, 3, sim.Config{})
	checkPrefillerCacheReported(t, f.d, longPrompt(6, 2000), true, true)
}

// checkPrefillerCacheReported runs two turns of content on d, streamed
// as asked, and checks that the second, on another (cold) decoder, is
// told the prefiller's cache hit.
func checkPrefillerCacheReported(t *testing.T, d *Dispatcher, content string, streams ...bool) {
	t.Helper()
	var eps []*pools.Endpoint
	var usages []Usage
	for _, stream := range streams {
		tr, err := d.Begin(t.Context(), pdSpec(content, stream, `,"stream_options":{"include_usage":true}`))
		if err != nil {
			t.Fatal(err)
		}
		_, u := readTurn(t, tr, stream)
		eps = append(eps, tr.Endpoint())
		usages = append(usages, u)
		tr.End(nil)
	}
	if eps[0] == eps[1] {
		t.Fatalf("both turns on %s: the test needs the second on a cold decoder", eps[0].ID)
	}
	if c := usages[0].PromptTokensDetails.CachedTokens; c != 0 {
		t.Errorf("first turn: %d cached, want 0 (cold prefiller)", c)
	}
	if u := usages[1]; u.PromptTokensDetails.CachedTokens < u.PromptTokens-32 {
		t.Errorf("second turn: %d of %d cached, want the prefiller's hit though its decoder held nothing", u.PromptTokensDetails.CachedTokens, u.PromptTokens)
	}
}

// TestPDLegsCarryPriority: both legs of a split turn tell engines that
// schedule by priority the turn's band (background: 2).
func TestPDLegsCarryPriority(t *testing.T) {
	f := newPDFixture(t, 1, 1, sim.Config{SchedulingPolicy: sim.SchedulingPriority})
	spec := pdSpec(longPrompt(3, 2000), false, "")
	spec.ClientHeader.Set(PriorityHeader, "background")
	tr, err := f.d.Begin(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	readTurn(t, tr, false)
	tr.End(nil)
	pl, dl := f.prefill[0].received(), f.decode[0].received()
	if len(pl) != 1 || len(dl) != 1 {
		t.Fatalf("%d prefill legs, %d decode legs: want 1 each", len(pl), len(dl))
	}
	if p, d := string(pl[0].body["priority"]), string(dl[0].body["priority"]); p != "2" || d != "2" {
		t.Errorf("priority: prefill leg %q, decode leg %q; want 2 on both", p, d)
	}
}
