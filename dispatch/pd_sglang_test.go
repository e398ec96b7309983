package dispatch

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/pools"
)

// sglangFixture is an SGLang-flavoured P/D fleet: prefill engines whose
// bootstrap port is their own (the simulator's), decode engines.
type sglangFixture struct {
	d               *Dispatcher
	prefill, decode []*simEngine
}

// newSGLangFixture starts the fleet; prefillURLs, when set, replace the
// prefill engines' URLs in the pool (a server in front of them).
func newSGLangFixture(t *testing.T, decoders int, dcfg sim.Config, prefillURLs ...string) *sglangFixture {
	t.Helper()
	f := &sglangFixture{}
	pe := newSimEngine(t, sim.Config{Flavor: sim.FlavorSGLang, Role: sim.RolePrefill})
	f.prefill = []*simEngine{pe}
	if len(prefillURLs) == 0 {
		prefillURLs = []string{pe.URL}
	}
	ppc := pools.PoolConfig{Name: "prefill", Engine: pools.EngineSGLang, Role: pools.RolePrefill, ServedModels: []string{testModel}}
	for _, u := range prefillURLs {
		pu, _ := url.Parse(pe.URL) // the bootstrap endpoint is the engine's own
		port, _ := strconv.Atoi(pu.Port())
		ppc.Endpoints = append(ppc.Endpoints, pools.EndpointConfig{URL: u, BootstrapPort: port})
	}
	dpc := pools.PoolConfig{Name: "decode", Engine: pools.EngineSGLang, Role: pools.RoleDecode, ServedModels: []string{testModel}}
	dcfg.Flavor, dcfg.Role = sim.FlavorSGLang, sim.RoleDecode
	for range decoders {
		e := newSimEngine(t, dcfg)
		f.decode = append(f.decode, e)
		dpc.Endpoints = append(dpc.Endpoints, pools.EndpointConfig{URL: e.URL})
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{ppc, dpc}, pools.Options{BreakerFailures: 3, BreakerOpenFor: time.Minute}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{ScrapedAt: time.Now().Add(time.Hour)})
	}
	pd := affinity.PDConfig{UncachedTokens: 256, PrefillTimeout: 5 * time.Second}
	f.d, err = New(Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: slog.New(slog.DiscardHandler), Metrics: prometheus.NewRegistry(), PD: &pd})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// bootstrapOf reads a leg's bootstrap fields, "" each when absent.
func bootstrapOf(l leg) (host, port, room string) {
	return string(l.body["bootstrap_host"]), string(l.body["bootstrap_port"]), string(l.body["bootstrap_room"])
}

// TestSGLangTwoLegs: a long turn goes to a prefiller and a decoder at
// once, both with the same bootstrap fields naming the prefiller and a
// fresh room, and the same request id; the decoder pulls the room's KV
// and answers; the client is told the prefiller's cached tokens.
func TestSGLangTwoLegs(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := newSGLangFixture(t, 1, sim.Config{})
			content := longPrompt(11, 2000)
			extra := ""
			if stream {
				extra = `,"stream_options":{"include_usage":true}`
			}
			for turn := range 2 {
				tr, err := f.d.Begin(t.Context(), pdSpec(content, stream, extra))
				if err != nil {
					t.Fatal(err)
				}
				text, u := readTurn(t, tr, stream)
				tr.End(nil)
				if u.CompletionTokens != 12 || text == "" {
					t.Errorf("turn %d: %q, usage %+v", turn, text, u)
				}
				if turn == 1 && u.PromptTokensDetails.CachedTokens < u.PromptTokens-32 {
					t.Errorf("turn 2: cached %d of %d: want the prefiller's hit", u.PromptTokensDetails.CachedTokens, u.PromptTokens)
				}
			}
			pl, dl := f.prefill[0].received(), f.decode[0].received()
			if len(pl) != 2 || len(dl) != 2 {
				t.Fatalf("%d prefill legs, %d decode legs: want 2 each", len(pl), len(dl))
			}
			pu, _ := url.Parse(f.prefill[0].URL)
			for i := range 2 {
				ph, pp, pr := bootstrapOf(pl[i])
				dh, dp, dr := bootstrapOf(dl[i])
				if ph != strconv.Quote(pu.Hostname()) || pp != pu.Port() || pr == "" || ph != dh || pp != dp || pr != dr {
					t.Errorf("leg %d: prefill bootstrap %s:%s room %s, decode %s:%s room %s: want the prefiller's on both, one room", i, ph, pp, pr, dh, dp, dr)
				}
				if room, err := strconv.ParseUint(pr, 10, 64); err != nil || room>>63 != 0 {
					t.Errorf("room %s is not a 63-bit integer", pr)
				}
				if pl[i].requestID != "req-pd" || dl[i].requestID != "req-pd" {
					t.Errorf("request ids %q %q", pl[i].requestID, dl[i].requestID)
				}
				if string(pl[i].body["stream"]) != "false" || pl[i].body["stream_options"] != nil || string(pl[i].body["messages"]) != string(dl[i].body["messages"]) {
					t.Errorf("prefill leg: stream %s stream_options %s", pl[i].body["stream"], pl[i].body["stream_options"])
				}
				if string(dl[i].body["stream"]) != fmt.Sprint(stream) || string(dl[i].body["max_tokens"]) != "12" || pl[i].body["kv_transfer_params"] != nil {
					t.Errorf("decode leg: stream %s max_tokens %s", dl[i].body["stream"], dl[i].body["max_tokens"])
				}
			}
			if string(pl[0].body["bootstrap_room"]) == string(pl[1].body["bootstrap_room"]) {
				t.Error("two turns shared a room")
			}
			m := f.d.pdm
			if n := testutil.ToFloat64(m.decisions.WithLabelValues(pdSGLang, affinity.PDDisaggregated)); n != 2 {
				t.Errorf("%v sglang disaggregated decisions, want 2", n)
			}
			if n := testutil.ToFloat64(m.decisions.WithLabelValues(pdVLLM, affinity.PDDisaggregated)); n != 0 {
				t.Errorf("%v vllm decisions", n)
			}
			if n := testutil.CollectAndCount(m.prefillLeg); n != 1 {
				t.Errorf("%d prefill leg series, want sglang's", n)
			}
		})
	}
}

// TestSGLangPrefillerDown: with the prefiller gone, every turn is
// prefilled by the decoder from the client's own body.
func TestSGLangPrefillerDown(t *testing.T) {
	f := newSGLangFixture(t, 1, sim.Config{})
	f.prefill[0].Close()
	answerTurns(t, f.d, longPrompt(12, 1000), false, true)
	// Each turn's decode leg is cancelled and the plain body follows; the
	// decoder may see a cancelled leg after the fallback it caused, so
	// the plain ones are counted, not placed (and a plain one the
	// decoder dropped is sent again, as any leg before its first byte).
	dl := f.decode[0].received()
	plain := 0
	for _, l := range dl {
		if l.body["bootstrap_room"] == nil {
			plain++
		}
	}
	if plain < 2 {
		t.Fatalf("%d decode legs, %d plain: want a plain local prefill for each turn", len(dl), plain)
	}
	m := f.d.pdm
	failed := testutil.ToFloat64(m.fallbacks.WithLabelValues(pdSGLang, pdFallbackPrefillFailed))
	refused := testutil.ToFloat64(m.fallbacks.WithLabelValues(pdSGLang, pdFallbackKVRefused))
	if failed+refused != 2 {
		t.Errorf("%v prefill_failed + %v kv_refused fallbacks, want 2 in all", failed, refused)
	}
}

// TestSGLangRoomNeverArrives: a prefiller that answers without ever
// publishing the room leaves the decoder waiting until its bootstrap
// timeout; it refuses the room and prefills the turn itself.
func TestSGLangRoomNeverArrives(t *testing.T) {
	// In front of the prefill engine: its bootstrap endpoint, but prefill
	// legs answered at once and never computed.
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(front.Close)
	f := newSGLangFixture(t, 1, sim.Config{BootstrapTimeout: 20 * time.Millisecond}, front.URL)
	answerTurns(t, f.d, longPrompt(13, 1000), true)
	checkRefusedThenPlain(t, f.d, f.decode[0], pdSGLang, "bootstrap_room")
}

func TestSGLangBodies(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":300,"messages":[]}`)
	dec, pre, err := sglangBodies(body, "10.0.0.7", 8998, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":300,"messages":[],"bootstrap_host":"10.0.0.7","bootstrap_port":8998,"bootstrap_room":4611686018427387904}`; string(dec) != want {
		t.Errorf("decode leg\n%s\nwant\n%s", dec, want)
	}
	if want := `{"model":"m","stream":false,"max_tokens":300,"messages":[],"bootstrap_host":"10.0.0.7","bootstrap_port":8998,"bootstrap_room":4611686018427387904}`; string(pre) != want {
		t.Errorf("prefill leg\n%s\nwant\n%s", pre, want)
	}
	if want := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":300,"messages":[]}`; string(body) != want {
		t.Errorf("sglangBodies changed the client's body: %s", body)
	}
	own := []byte(`{"bootstrap_room":7,"model":"m"}`)
	dec, _, err = sglangBodies(own, "h", 1, 9)
	if err != nil || string(dec) != `{"bootstrap_room":9,"model":"m","bootstrap_host":"h","bootstrap_port":1}` {
		t.Errorf("the client's own room: %s, %v", dec, err)
	}
	var v map[string]any
	if err := json.Unmarshal(dec, &v); err != nil {
		t.Error(err)
	}
}

// BenchmarkSGLangLegBodies: building an SGLang P/D turn's two bodies
// from an 8k-token chat request, once per disaggregated turn.
func BenchmarkSGLangLegBodies(b *testing.B) {
	body := pdSpec(longPrompt(1, 8192), true, `,"stream_options":{"include_usage":true}`).Body
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := sglangBodies(body, "10.0.0.7", 8998, newRoom()); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSGLangUsageReportsPrefillerCache: a cold decoder computes none of
// the prompt; the client is told what the prefill found cached, at the
// prefiller, as the prefill leg's discarded answer reported it.
func TestSGLangUsageReportsPrefillerCache(t *testing.T) {
	// Three decoders: round-robin's counter also turns for the prefill
	// pick, so the second turn lands on another decoder.
	f := newSGLangFixture(t, 3, sim.Config{})
	checkPrefillerCacheReported(t, f.d, longPrompt(14, 2000), true, false)
}
