package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/kv"
	"github.com/turnpike-gateway/turnpike/pools"
	"github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/sessions"
	"github.com/turnpike-gateway/turnpike/state"
	"github.com/turnpike-gateway/turnpike/turns"
)

// stackOptions shape a gateway in front of real simulated engines with the
// whole turn path: sessions, flow control, the cache-aware policy.
type stackOptions struct {
	engines int
	tenants []turns.Tenant
	// flow is the flowControl section; zero fields take the defaults.
	flow turns.FlowControl
}

type stack struct {
	front   *httptest.Server
	flow    *turns.Controller
	index   *kv.Index
	reg     *pools.Registry
	sess    *sessions.Store
	engines []string
}

// prefixHits is the engines' own count of prompt tokens served from their
// prefix caches, summed over the fleet.
func (st *stack) prefixHits(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for _, u := range st.engines {
		resp, err := http.Get(u + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		l, err := pools.ParseLoad(pools.EngineVLLM, resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		sum += l.PrefixHits
	}
	return sum
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	var eps []pools.EndpointConfig
	var engines []string
	for i := 0; i < o.engines; i++ {
		eng, err := sim.New(sim.Config{ServedModelName: testModel, TimeScale: 0, Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(eng.Handler())
		t.Cleanup(func() { srv.Close(); eng.Close() })
		eps = append(eps, pools.EndpointConfig{URL: srv.URL})
		engines = append(engines, srv.URL)
	}
	log := slog.New(slog.DiscardHandler)
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "sim", ServedModels: []string{testModel}, Endpoints: eps}}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, ep := range reg.Endpoints() {
		ep.SetLoad(pools.Load{ScrapedAt: now.Add(time.Hour)}) // fresh for the test's span
	}
	metrics := prometheus.NewRegistry()
	sess, err := sessions.NewStore(sessions.Options{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	index := kv.NewIndex(kv.IndexOptions{})
	hasher := &kv.Hasher{}
	var routing affinity.Config
	routing.EnsureDefaults()
	policy, err := affinity.NewPolicy(routing, affinity.Deps{Index: index, Hasher: hasher, Sessions: sess, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	fc := o.flow
	fc.EnsureDefaults()
	flow, err := turns.New(turns.Config{FlowControl: fc, Tenants: o.tenants}, turns.WithRegisterer(metrics))
	if err != nil {
		t.Fatal(err)
	}
	flow.Start(context.Background())
	t.Cleanup(func() { flow.Close(context.Background()) })
	db, err := state.OpenPebble(t.TempDir(), state.PebbleOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Options{Registry: reg, Policy: policy, Logger: log, Metrics: metrics, Sessions: sess, Flow: flow, Hasher: hasher})
	if err != nil {
		t.Fatal(err)
	}
	svc := responses.New(responses.NewStore(db.Namespace("rs/"), responses.StoreOptions{}), d, responses.Config{CollectInterval: -1, Logger: log})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()); db.Close() })
	s, err := New(Options{Registry: reg, Dispatch: d, Logger: log, Metrics: metrics, Responses: svc})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(s.Handler())
	t.Cleanup(front.Close)
	return &stack{front: front, flow: flow, index: index, reg: reg, sess: sess, engines: engines}
}

func longChat(stream bool) string {
	system := strings.Repeat("You are a careful coding agent. ", 60)
	return fmt.Sprintf(`{"model":%q,"stream":%t,"max_tokens":8,"messages":[{"role":"system","content":%q},{"role":"user","content":"Fix the build."}]}`, testModel, stream, system)
}

// TestShedAnswersWithRetryAfterAndReason: a tenant over its request quota
// is told so, with when to retry and why, in OpenAI's error shape.
func TestShedAnswersWithRetryAfterAndReason(t *testing.T) {
	st := newStack(t, stackOptions{engines: 1, tenants: []turns.Tenant{
		{Name: DefaultTenant, Weight: 1, Quota: turns.Quota{RequestsPerMinute: 1}},
	}})
	if r := post(t, st.front.URL, longChat(false)); r.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d", r.StatusCode)
	}
	r := post(t, st.front.URL, longChat(false))
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request within the minute: %d, want 429", r.StatusCode)
	}
	if r.Header.Get("Retry-After") == "" || r.Header.Get("X-Turnpike-Dropped-Reason") != turns.ReasonQuotaRPM {
		t.Fatalf("shed headers: Retry-After %q, reason %q", r.Header.Get("Retry-After"), r.Header.Get("X-Turnpike-Dropped-Reason"))
	}
	eb := readAPIError(t, r)
	if eb.Error.Code == nil || *eb.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("code %v", eb.Error.Code)
	}
}

// TestShedOnTheResponsesPath: a Responses turn refused by flow control is
// answered like a chat completion — 429, Retry-After, the reason — not a
// server error.
func TestShedOnTheResponsesPath(t *testing.T) {
	st := newStack(t, stackOptions{engines: 1, tenants: []turns.Tenant{
		{Name: DefaultTenant, Weight: 1, Quota: turns.Quota{RequestsPerMinute: 1}},
	}})
	create := func() *http.Response {
		resp, err := http.Post(st.front.URL+"/v1/responses", "application/json",
			strings.NewReader(`{"model":"test-model","input":"Fix the build.","max_output_tokens":8}`))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if r := create(); r.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(r.Body)
		t.Fatalf("first response: %d %s", r.StatusCode, body)
	}
	r := create()
	if r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || r.Header.Get("X-Turnpike-Dropped-Reason") != turns.ReasonQuotaRPM {
		body, _ := io.ReadAll(r.Body)
		t.Fatalf("over quota: %d, Retry-After %q, reason %q: %s", r.StatusCode, r.Header.Get("Retry-After"), r.Header.Get("X-Turnpike-Dropped-Reason"), body)
	}
	readAPIError(t, r)
}

// TestTurnWaitsForAnEndpoint: while no endpoint of the model is
// available (every replica failed its health checks at once), a turn waits
// in its band's queue instead of being answered 503, and runs as soon as
// an endpoint is back.
func TestTurnWaitsForAnEndpoint(t *testing.T) {
	st := newStack(t, stackOptions{engines: 2})
	for _, ep := range st.reg.Endpoints() {
		ep.SetHealthy(false)
	}
	type answer struct {
		status int
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Post(st.front.URL+"/v1/chat/completions", "application/json", strings.NewReader(longChat(false)))
		if err != nil {
			done <- answer{err: err}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- answer{status: resp.StatusCode}
	}()
	waitQueued(t, st.flow, 1)
	select {
	case a := <-done:
		t.Fatalf("answered %d %v with no endpoint, want it to wait", a.status, a.err)
	default:
	}
	st.reg.Endpoints()[1].SetHealthy(true)
	select {
	case a := <-done:
		if a.err != nil || a.status != http.StatusOK {
			t.Fatalf("after an endpoint came back: %d %v, want 200", a.status, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting turn did not run once an endpoint was back")
	}
}

// TestTurnWaitsItsTTLForAnEndpoint: when no endpoint comes back within the
// band's TTL, the turn is answered 503 no-endpoints with a Retry-After.
func TestTurnWaitsItsTTLForAnEndpoint(t *testing.T) {
	st := newStack(t, stackOptions{engines: 1, flow: turns.FlowControl{Bands: turns.BandsConfig{Standard: turns.BandConfig{TTL: 100 * time.Millisecond}}}})
	st.reg.Endpoints()[0].SetHealthy(false)
	r := post(t, st.front.URL, longChat(false))
	if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || r.Header.Get("X-Turnpike-Dropped-Reason") != turns.ReasonNoEndpoints {
		body, _ := io.ReadAll(r.Body)
		t.Fatalf("no endpoint for the whole TTL: %d, Retry-After %q, reason %q: %s", r.StatusCode, r.Header.Get("Retry-After"), r.Header.Get("X-Turnpike-Dropped-Reason"), body)
	}
	readAPIError(t, r)
}

// waitQueued waits until flow holds n queued turns.
func waitQueued(t *testing.T, flow *turns.Controller, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for flow.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d turns queued, want %d", flow.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTicketsAreReleased: with one concurrent turn allowed, sequential
// requests of every kind all pass — a leaked ticket would shed the next.
func TestTicketsAreReleased(t *testing.T) {
	st := newStack(t, stackOptions{engines: 2, tenants: []turns.Tenant{
		{Name: DefaultTenant, Weight: 1, Quota: turns.Quota{Concurrent: 1}},
	}})
	for i, body := range []string{longChat(false), longChat(true), `{"model":"test-model","messages":[{"role":"user","content":"x"}],"max_tokens":99999999}`, longChat(true)} {
		r := post(t, st.front.URL, body)
		io.ReadAll(r.Body)
		r.Body.Close()
		if i != 2 && r.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, r.StatusCode)
		}
		if i == 2 && r.StatusCode != http.StatusBadRequest {
			t.Fatalf("request %d (over the context window): %d, want the engine's 400", i, r.StatusCode)
		}
		if n := st.flow.Len(); n != 0 {
			t.Fatalf("after request %d, %d turns still held", i, n)
		}
	}
}

// TestCacheAwareReusesPrefix: a repeated long prompt goes back to the
// engine that holds it, so every repeat reports cached tokens, streamed or
// not; and a stream the client asked without usage gets none.
func TestCacheAwareReusesPrefix(t *testing.T) {
	st := newStack(t, stackOptions{engines: 4})
	r := post(t, st.front.URL, longChat(false))
	io.ReadAll(r.Body)
	if st.index.Len() == 0 {
		t.Fatal("the routed prompt was not recorded in the KV index")
	}
	for i := 0; i < 6; i++ {
		var cached float64
		if i%2 == 0 {
			var out struct {
				Usage struct {
					PromptTokensDetails struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			json.NewDecoder(post(t, st.front.URL, longChat(false)).Body).Decode(&out)
			cached = float64(out.Usage.PromptTokensDetails.CachedTokens)
		} else {
			before := st.prefixHits(t)
			body, _ := io.ReadAll(post(t, st.front.URL, longChat(true)).Body)
			if strings.Contains(string(body), `"usage":{`) {
				t.Fatalf("a stream without stream_options.include_usage carried usage: %s", body)
			}
			if !strings.Contains(string(body), "[DONE]") {
				t.Fatalf("stream not relayed whole: %s", body)
			}
			cached = st.prefixHits(t) - before
		}
		if cached == 0 {
			t.Fatalf("repeat %d: no cached tokens; routed away from the cached prefix", i)
		}
	}
}

// TestResponsesChainReusesPrefix: the second turn of a previous_response_id
// chain, which names no session, is routed back to the engine holding the
// first turn's context and reports it cached.
func TestResponsesChainReusesPrefix(t *testing.T) {
	st := newStack(t, stackOptions{engines: 4})
	create := func(body string) map[string]any {
		resp, err := http.Post(st.front.URL+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %v", resp.StatusCode, out)
		}
		return out
	}
	// The long text is input, not instructions: instructions are not
	// carried along a previous_response_id chain.
	task := "Fix the build. " + strings.Repeat("The log says the linker failed. ", 60)
	first := create(fmt.Sprintf(`{"model":%q,"input":%q,"max_output_tokens":8}`, testModel, task))
	for i := 0; i < 4; i++ {
		next := create(fmt.Sprintf(`{"model":%q,"previous_response_id":%q,"input":"And the tests, part %d.","max_output_tokens":8}`, testModel, first["id"], i))
		cached := next["usage"].(map[string]any)["input_tokens_details"].(map[string]any)["cached_tokens"].(float64)
		if cached == 0 {
			t.Fatalf("turn %d of the chain: no cached tokens; routed away from its context", i+2)
		}
		first = next
	}
}
