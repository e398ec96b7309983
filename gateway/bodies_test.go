package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/internal/gatewaytest"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
)

// bodyWindow is the context window, in tokens, of the model of
// newResponsesStack (llama-3.1-8b), whose Responses turns the gateway
// counts with prompt.Approx; the stack's body limit is 1 MiB.
const bodyWindow = 131072

// setBodies sets the body budget and the most bytes a token holds on st's
// gateway, as Options.BodyBudget and Options.MaxTokenBytes set them
// (newResponsesStack takes neither).
func setBodies(st *responsesStack, budget int64, tokenBytes int) {
	s := st.server
	s.bodies.limit = budget
	s.opts.MaxTokenBytes = tokenBytes
	s.contextFloor = s.contextFloors()
}

// metric is the value of st's gateway's metric name with labels.
func (st *responsesStack) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := st.server.opts.Metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i, l := range m.GetLabel() {
				if 2*i+1 >= len(labels) || l.GetName() != labels[2*i] || l.GetValue() != labels[2*i+1] {
					continue metrics
				}
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// holdBody starts a chat completion that states a body of n bytes and
// sends none of it until release is called, and waits until the gateway
// holds its n bytes in the budget.
func (st *responsesStack) holdBody(t *testing.T, n int64) (release func()) {
	t.Helper()
	held := st.metric(t, "turnpike_request_body_bytes_in_flight")
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, st.front.URL+"/v1/chat/completions", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return st.metric(t, "turnpike_request_body_bytes_in_flight") == held+float64(n) })
	return func() {
		pw.CloseWithError(errors.New("released"))
		<-done
	}
}

// waitFor polls cond until it holds, for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// chatText is a chat completion whose one user message is n bytes of
// text.
func chatText(n int) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     testModel,
		MaxTokens: openai.Int(4),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(lorem(n))},
	}
}

func lorem(n int) string {
	return strings.Repeat("lorem ipsum dolor sit amet ", n/27+1)[:n]
}

// TestSDKBodyBudget (issue 32): a request whose body would take the
// bodies in flight past the budget is refused with a 503, Retry-After and
// an OpenAI-shaped error before its body is read; one whose body states
// no length is refused at the read that passes the budget (or the body
// limit, with a 413); once the bodies in flight end, requests are served,
// and the budget is whole again.
func TestSDKBodyBudget(t *testing.T) {
	const budget = 1 << 20
	st := newResponsesStack(t, 0)
	setBodies(st, budget, DefaultMaxTokenBytes)
	ctx := context.Background()
	if got := st.metric(t, "turnpike_request_body_budget_bytes"); got != budget {
		t.Fatalf("budget metric %v, want %d", got, budget)
	}

	release := st.holdBody(t, budget-64<<10)
	// A body that the gateway does not read: the client still gets the
	// answer.
	var raw *http.Response
	_, err := st.client.Chat.Completions.New(ctx, chatText(512<<10), option.WithResponseInto(&raw))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Code != "server_overloaded" || apiErr.Type != "server_error" {
		t.Fatalf("a body past the budget: %v", err)
	}
	if raw.Header.Get("Retry-After") == "" {
		t.Error("the 503 has no Retry-After")
	}
	if st.engine.Count() != 0 {
		t.Error("a request past the budget reached the engine")
	}

	// Chunked: no length stated, so the bytes are taken as they are read.
	resp, err := http.Post(st.front.URL+"/v1/chat/completions", "application/json",
		io.MultiReader(strings.NewReader(`{"model":"test-model","messages":[{"role":"user","content":"`+lorem(128<<10)+`"}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	eb := readAPIError(t, resp)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || eb.Error.Code == nil || *eb.Error.Code != "server_overloaded" {
		t.Fatalf("a chunked body past the budget: status %d, %+v", resp.StatusCode, eb)
	}
	if got := st.metric(t, "turnpike_request_body_refusals_total", "reason", "budget"); got != 2 {
		t.Errorf("budget refusals %v, want 2", got)
	}

	release()
	waitFor(t, func() bool { return st.metric(t, "turnpike_request_body_bytes_in_flight") == 0 })
	// Chunked past the body limit: a 413, whatever the budget.
	resp, err = http.Post(st.front.URL+"/v1/chat/completions", "application/json",
		io.MultiReader(strings.NewReader(`{"model":"test-model","messages":[{"role":"user","content":"`+lorem(budget)+`"}]}`)))
	if err != nil {
		t.Fatal(err)
	}
	eb = readAPIError(t, resp)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || eb.Error.Code == nil || *eb.Error.Code != "request_too_large" {
		t.Fatalf("a chunked body past the limit: status %d, %+v", resp.StatusCode, eb)
	}

	waitFor(t, func() bool { return st.metric(t, "turnpike_request_body_bytes_in_flight") == 0 })
	if _, err := st.client.Chat.Completions.New(ctx, chatText(128<<10)); err != nil {
		t.Fatalf("a request once the budget is free: %v", err)
	}
	r, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text(lorem(128 << 10)), MaxOutputTokens: openai.Int(16)})
	if err != nil || r.Status != responses.ResponseStatusCompleted {
		t.Fatalf("a Responses request once the budget is free: %v", err)
	}
	if got := st.metric(t, "turnpike_request_body_bytes_in_flight"); got != 0 {
		t.Errorf("%v bytes still in flight after every request ended", got)
	}
}

// TestSDKContextLengthByBytes (issue 32): a body whose text alone is
// longer than the model's window times the most bytes a token holds is
// refused with a 400 context_length_exceeded before it is decoded or sent
// to an engine; a body as long but of other bytes (an image), or whose
// text just fits, is not refused by its length, nor is a Responses body
// whose truncation lets the context be cut.
func TestSDKContextLengthByBytes(t *testing.T) {
	const tokenBytes = 4
	st := newResponsesStack(t, 0)
	setBodies(st, DefaultBodyBudget, tokenBytes)
	ctx := context.Background()
	refusals := func() float64 {
		return st.metric(t, "turnpike_request_body_refusals_total", "reason", "context_length")
	}
	wantRefused := func(t *testing.T, err error, param string) {
		t.Helper()
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Code != "context_length_exceeded" || apiErr.Param != param {
			t.Fatalf("want a 400 context_length_exceeded on %s, got %v", param, err)
		}
	}

	t.Run("chat", func(t *testing.T) {
		before, sent := refusals(), st.engine.Count()
		_, err := st.client.Chat.Completions.New(ctx, chatText(bodyWindow*tokenBytes+1))
		wantRefused(t, err, "messages")
		if st.engine.Count() != sent || refusals() != before+1 {
			t.Errorf("engine requests %d → %d, refusals %v → %v", sent, st.engine.Count(), before, refusals())
		}
	})
	t.Run("chat text that fits by its length", func(t *testing.T) {
		before, sent := refusals(), st.engine.Count()
		st.client.Chat.Completions.New(ctx, chatText(bodyWindow*tokenBytes))
		if refusals() != before || st.engine.Count() != sent+1 {
			t.Errorf("the body was refused by its length (refusals %v → %v; engine requests %d → %d)", before, refusals(), sent, st.engine.Count())
		}
	})
	t.Run("chat image", func(t *testing.T) {
		before, sent := refusals(), st.engine.Count()
		image := "data:image/png;base64," + strings.Repeat("iVBORw0KGgo", bodyWindow*tokenBytes/11+1)
		st.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: testModel, MaxTokens: openai.Int(4),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart("What is in this picture?"),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: image}),
			})},
		})
		if refusals() != before || st.engine.Count() != sent+1 {
			t.Fatalf("an image was counted as text (refusals %v → %v; engine requests %d → %d)", before, refusals(), sent, st.engine.Count())
		}
		// The body, read into a stage and checked there, went on whole.
		if !strings.Contains(st.engine.Last(), image) {
			t.Error("the engine did not get the image the client sent")
		}
	})
	t.Run("completions", func(t *testing.T) {
		before := refusals()
		_, err := st.client.Completions.New(ctx, openai.CompletionNewParams{
			Model: testModel, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(lorem(bodyWindow*tokenBytes + 1))},
		})
		wantRefused(t, err, "prompt")
		if refusals() != before+1 {
			t.Errorf("refusals %v → %v", before, refusals())
		}
	})
	// The gateway counts Responses turns of this model with the
	// approximate tokenizer, and refuses past the window by that count:
	// four bytes a token, whatever MaxTokenBytes says.
	t.Run("responses", func(t *testing.T) {
		before, sent := refusals(), st.engine.Count()
		_, err := st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text(lorem(4*bodyWindow + 1))})
		wantRefused(t, err, "input")
		if st.engine.Count() != sent || refusals() != before+1 {
			t.Errorf("engine requests %d → %d, refusals %v → %v", sent, st.engine.Count(), before, refusals())
		}
	})
	t.Run("responses truncation auto", func(t *testing.T) {
		before := refusals()
		st.client.Responses.New(ctx, responses.ResponseNewParams{Model: testModel, Input: text(lorem(4*bodyWindow + 1)),
			Truncation: responses.ResponseNewParamsTruncationAuto})
		if refusals() != before {
			t.Error("a body whose context may be cut was refused by its length")
		}
	})
}

// TestBodyPeakCost (issue 32): what a body refused before decoding costs
// the gateway, on the heap and in stages, is at most three times its size
// (here: it is read once, outside the heap, and the length check
// allocates nothing); a request refused for the budget costs nothing of
// its size.
func TestBodyPeakCost(t *testing.T) {
	const size = 900 << 10
	st := newResponsesStack(t, 0)
	setBodies(st, 1<<20, 4) // 900 KiB of text is past the window
	h := st.server.Handler()
	chat := []byte(fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, testModel, lorem(size)))
	resp := []byte(fmt.Sprintf(`{"model":%q,"input":%q}`, testModel, lorem(size)))
	for _, tc := range []struct {
		name, path string
		body       []byte
		status     int
		// most is the most the request may allocate, in bodies.
		most float64
	}{
		{"chat", "/v1/chat/completions", chat, http.StatusBadRequest, 3},
		{"responses", "/v1/responses", resp, http.StatusBadRequest, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			staged := st.metric(t, "turnpike_request_body_stage_bytes")
			alloc := allocated(func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, tc.path, bytes.NewReader(tc.body)))
				if w.Code != tc.status {
					t.Fatalf("status %d, want %d: %.200s", w.Code, tc.status, w.Body.String())
				}
			})
			// The stage, kept for reuse, is mapped still (or was already).
			stage := max(st.metric(t, "turnpike_request_body_stage_bytes")-staged, staged)
			cost := (float64(alloc) + stage) / float64(len(tc.body))
			t.Logf("%s: %d bytes allocated and %v staged for a body of %d: %.2f times its size", tc.name, alloc, stage, len(tc.body), cost)
			if cost > tc.most {
				t.Errorf("the body cost %.2f times its size; at most %v", cost, tc.most)
			}
		})
	}
	t.Run("over the budget", func(t *testing.T) {
		release := st.holdBody(t, 1<<20-size/2)
		defer release()
		alloc := allocated(func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(chat)))
			if w.Code != http.StatusServiceUnavailable {
				t.Fatalf("status %d: %.200s", w.Code, w.Body.String())
			}
		})
		if alloc > len(chat)/16 {
			t.Errorf("a request refused for the budget allocated %d bytes of its body's %d", alloc, len(chat))
		}
	})
}

// allocated is the bytes the process allocates while f runs.
func allocated(f func()) int {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int(after.TotalAlloc - before.TotalAlloc)
}

// TestStagePool (issue 32): stages are reused, smallest fit first, and
// after a burst the pool keeps at most its cap; the rest goes back to the
// system as each body is done.
func TestStagePool(t *testing.T) {
	p := &stagePool{max: 4 * stageGrain}
	var burst [][]byte
	for range 10 {
		burst = append(burst, p.get(stageGrain-100))
	}
	big := p.get(2*stageGrain + 1)
	if cap(big) != 3*stageGrain || p.mapped.Load() != 13*stageGrain {
		t.Fatalf("stage of %d bytes, %d mapped", cap(big), p.mapped.Load())
	}
	for _, b := range append(burst, big) {
		b = append(b, "body"...)
		p.put(b)
	}
	if got := p.mapped.Load(); got != 4*stageGrain {
		t.Errorf("after the burst %d bytes mapped, want the cap's %d", got, 4*stageGrain)
	}
	if b := p.get(10); cap(b) != stageGrain || p.mapped.Load() != 4*stageGrain {
		t.Errorf("a stage kept was not reused: a stage of %d, %d mapped", cap(b), p.mapped.Load())
	}
}

// TestAcceptedBodyCost (issue 32): what a body let through costs the
// gateway at its peak, beyond what the same request with a two-byte text
// costs, is at most three times its size: three times the body rounded
// up to the heap's 8 KiB pages, as the heap holds a large object, and
// for a staged body 64 KiB more, a stage's rounding.
//
// What is measured: the live heap (what a full collection leaves; the
// garbage a request leaves is the collector's to pace, GOGC) at the two
// moments a request holds the most of its body, less the live heap
// before it: as its engine is sent the turn (the body, the request
// decoded from it and the engine's body), and as the store applies a
// stored response's batch, counted as the live heap when Apply begins
// plus every byte the process allocates until it returns (the batch, the
// log's blocks, and whatever Pebble's own goroutines allocate meanwhile:
// a bound from above). A stage, mapped outside the heap, is added whole.
// The pools the request draws on are empty before it, as in a burst.
//
// Also bounded: all the request allocates (the garbage the collector
// must take), three times the body and 64 KiB; a stored response's
// batch and its log's blocks, which Pebble allocates anew after it
// starts a new log, add up to two and a half more.
//
// A body of plain text is read straight into the buffer its handler
// keeps; one whose JSON escapes make it longer than its text could be in
// the model's window is staged and checked first.
func TestAcceptedBodyCost(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts: the race detector drops pooled buffers at random")
	}
	const size = 400 << 10
	var m heapMeter
	st := newMeteredStack(t, discardingEngine(t, sim.Config{ServedModelName: testModel}, m.sample), &m)
	st.engine.Discard.Store(true)
	h := st.server.Handler()
	serve := func(t *testing.T, path, body string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %.300s", w.Code, w.Body.String())
		}
	}
	serve(t, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, testModel))
	setBodies(st, 64<<20, 4)                     // the window known: stages what is past 512 KiB
	escaped := strings.Repeat(`\u003c`, 100<<10) // 600 KiB of JSON, 100 KiB of text
	const (
		chat     = `{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"%s"}]}`
		resp     = `{"model":%q,"max_output_tokens":2,"store":false,"input":"%s"}`
		stored   = `{"model":%q,"max_output_tokens":2,"input":"%s"}`
		chatPath = "/v1/chat/completions"
		respPath = "/v1/responses"
	)
	for _, tc := range []struct {
		name, path, format, text string
		staged                   bool
		// allocs is the most the request may allocate in all, in bodies.
		allocs float64
	}{
		{"chat", chatPath, chat, lorem(size), false, 3},
		{"responses", respPath, resp, lorem(size), false, 3},
		{"stored responses", respPath, stored, lorem(size), false, 5.5},
		{"chat staged", chatPath, chat, escaped, true, 3},
		{"responses staged", respPath, resp, escaped, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(tc.format, testModel, tc.text)
			small := fmt.Sprintf(tc.format, testModel, "hi")
			// The store's and the connections' own warm-up.
			serve(t, tc.path, body)
			serve(t, tc.path, small)
			cost := func(body string) (alloc, peak int, stage float64) {
				runtime.GC()
				runtime.GC() // empties the pools
				staged := st.metric(t, "turnpike_request_body_stage_bytes")
				alloc = allocated(func() { serve(t, tc.path, body) })
				// A stage kept for reuse is mapped still, or was already.
				if s := st.metric(t, "turnpike_request_body_stage_bytes"); s > staged || tc.staged {
					stage = max(s-staged, staged)
				}
				// The peak in a run of its own: a sample's collection
				// empties the pools the rest of the request draws on.
				runtime.GC()
				peak = m.during(func() { serve(t, tc.path, body) })
				return alloc, peak, stage
			}
			baseAlloc, basePeak, _ := cost(small)
			alloc, peak, stage := cost(body)
			if tc.staged != (stage > 0) {
				t.Fatalf("staged %v bytes, want staged %v", stage, tc.staged)
			}
			n := float64(len(body))
			pages := float64((len(body) + 8<<10 - 1) &^ (8<<10 - 1))
			peakCost, allocCost := float64(peak-basePeak)+stage, float64(alloc-baseAlloc)+stage
			t.Logf("%s, a body of %d: at its peak %d bytes live (%d for a two-byte text) and %v staged: %.2f times its size (%.2f in heap pages); %d bytes allocated in all (%d): %.2f times",
				tc.name, len(body), peak, basePeak, stage, peakCost/n, peakCost/pages, alloc, baseAlloc, allocCost/n)
			most := 3 * pages
			if tc.staged {
				most += stageGrain
			}
			if peakCost > most {
				t.Errorf("the body cost %.2f times its size at its peak (%.2f in heap pages); at most 3", peakCost/n, peakCost/pages)
			}
			if allocCost > tc.allocs*n+stageGrain {
				t.Errorf("the body allocated %.2f times its size; at most %v and 64 KiB", allocCost/n, tc.allocs)
			}
		})
	}
}

// heapMeter samples the live heap during a request: during reports the
// most it saw.
type heapMeter struct {
	armed atomic.Bool
	mu    struct {
		sync.Mutex
		// protects the field below
		peak int
	}
}

// liveHeap is the live heap: what a full collection leaves.
func liveHeap() int {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int(ms.HeapAlloc)
}

// sample notes the live heap now.
func (m *heapMeter) sample() { m.sampleAround(nil) }

// sampleAround runs f (if not nil), noting the live heap as it begins
// plus all that it allocates.
func (m *heapMeter) sampleAround(f func()) {
	if !m.armed.Load() {
		if f != nil {
			f()
		}
		return
	}
	n := liveHeap()
	if f != nil {
		n += allocated(f)
	}
	m.mu.Lock()
	m.mu.peak = max(m.mu.peak, n)
	m.mu.Unlock()
}

// during runs f and reports the most the heap held while it ran, beyond
// what it held before.
func (m *heapMeter) during(f func()) int {
	before := liveHeap()
	m.mu.Lock()
	m.mu.peak = before
	m.mu.Unlock()
	m.armed.Store(true)
	f()
	m.armed.Store(false)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.peak - before
}

// meteredNamespace is a state namespace whose batches a heapMeter
// samples as they are applied.
type meteredNamespace struct {
	state.Namespace
	m *heapMeter
}

func (n meteredNamespace) Apply(ctx context.Context, b *state.Batch) (err error) {
	n.m.sampleAround(func() { err = n.Namespace.Apply(ctx, b) })
	return err
}

// newMeteredStack is newResponsesOn over engine, with a Responses service
// of its own over a Pebble store whose batches m samples.
func newMeteredStack(t *testing.T, engine http.Handler, m *heapMeter) *responsesStack {
	return stackOf(func(mount gatewaytest.Mount) *gatewaytest.Stack {
		return gatewaytest.NewOn(t, tpresponses.Config{}, func(t testing.TB, p gatewaytest.Parts) http.Handler {
			db, err := state.OpenPebble(t.TempDir(), state.PebbleOptions{Logger: p.Logger})
			if err != nil {
				t.Fatal(err)
			}
			store := tpresponses.NewStore(meteredNamespace{db.Namespace("rs/"), m}, tpresponses.StoreOptions{})
			p.Service = tpresponses.New(store, p.Dispatch, tpresponses.Config{CollectInterval: -1, Logger: p.Logger})
			if err := p.Service.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				p.Service.Close(context.Background())
				db.Close()
			})
			return mount(t, p)
		}, engine)
	})
}

// discardingEngine is a simulated engine of cfg whose chat completions
// read their body into a buffer of their own and answer at once, so that
// what a test measures of its process is the gateway's; onTurn, when not
// nil, is called as each begins.
func discardingEngine(t testing.TB, cfg sim.Config, onTurn func()) http.Handler {
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	h := eng.Handler()
	var buf [32 << 10]byte
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			h.ServeHTTP(w, r)
			return
		}
		if onTurn != nil {
			onTurn()
		}
		// The gateway asks for a stream on the Responses API's behalf; the
		// chat completions of these tests do not.
		const member = `"stream":true`
		mu.Lock()
		stream, kept := false, 0
		for {
			n, err := r.Body.Read(buf[kept:])
			stream = stream || bytes.Contains(buf[:kept+n], []byte(member))
			kept = copy(buf[:], buf[max(kept+n-len(member), 0):kept+n])
			if err != nil {
				break
			}
		}
		mu.Unlock()
		if !stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`, testModel)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"ok\"},\"finish_reason\":null}]}\n\n", testModel)
		fmt.Fprintf(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":1,\"total_tokens\":11}}\n\ndata: [DONE]\n\n", testModel)
	})
}
