package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/turnpike-gateway/turnpike/accelerators"
)

// prefillLeg is the body a router sends a prefill engine, as vLLM's proxy
// does.
const prefillLeg = `,"stream":false,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

type prefillResult struct {
	chatResult
	KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
}

// prefill sends the prefill leg of content and returns the answered
// params.
func prefill(t *testing.T, url, content string) *KVTransferParams {
	t.Helper()
	resp := post(t, url+"/v1/chat/completions", chatBody(content, prefillLeg))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("prefill leg: status %d", resp.StatusCode)
	}
	r := decode[prefillResult](t, resp)
	if r.KVTransferParams == nil {
		t.Fatal("prefill answer has no kv_transfer_params")
	}
	return r.KVTransferParams
}

// decodeLeg is the decode leg's extra fields carrying params verbatim.
func decodeLeg(t *testing.T, p *KVTransferParams, extra string) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return `,"kv_transfer_params":` + string(b) + extra
}

func TestPrefillAnswersTransferParams(t *testing.T) {
	e, srv := newTestEngine(t, Config{Role: RolePrefill})
	content := prompt(1, 4000) // 1,000 tokens
	p := prefill(t, srv.URL, content)
	if !p.DoRemotePrefill || p.DoRemoteDecode {
		t.Errorf("flags: do_remote_prefill %v do_remote_decode %v, want true false", p.DoRemotePrefill, p.DoRemoteDecode)
	}
	if p.RemoteEngineID == nil || *p.RemoteEngineID != e.engineID || p.RemoteRequestID == nil || !strings.HasPrefix(*p.RemoteRequestID, "chatcmpl-") {
		t.Errorf("ids: engine %v request %v", p.RemoteEngineID, p.RemoteRequestID)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	if p.RemoteHost == nil || p.RemotePort == nil || !strings.HasPrefix(host, *p.RemoteHost+":") || !strings.HasSuffix(host, ":"+itoa(*p.RemotePort)) {
		t.Errorf("remote %v:%v, want the engine's address %s", p.RemoteHost, p.RemotePort, host)
	}
	promptTokens := CountTokens(RenderChat([]ChatMessage{{Role: "user", Content: TextContent(content)}}, nil))
	if want := ceilDiv(promptTokens+1, 16); len(p.RemoteBlockIDs) != want {
		t.Errorf("%d remote blocks, want %d (prompt %d tokens + 1 generated)", len(p.RemoteBlockIDs), want, promptTokens)
	}
	// The blocks are held: referenced although nothing runs.
	waitFor(t, func() bool { return e.Stats().UsedBlocks == len(p.RemoteBlockIDs) })
}

func TestDecodePullsInsteadOfRecomputing(t *testing.T) {
	const seed = 7
	pe, psrv := newTestEngine(t, Config{Role: RolePrefill, Seed: seed})
	de, dsrv := newTestEngine(t, Config{Role: RoleDecode, Seed: seed})
	be, bsrv := newTestEngine(t, Config{Role: RoleBoth, Seed: seed})
	content := prompt(2, 32000) // about 8k tokens
	p := prefill(t, psrv.URL, content)

	got := decode[chatResult](t, post(t, dsrv.URL+"/v1/chat/completions", chatBody(content, decodeLeg(t, p, `,"max_tokens":20,"ignore_eos":true`))))
	whole := decode[chatResult](t, post(t, bsrv.URL+"/v1/chat/completions", chatBody(content, `,"max_tokens":20,"ignore_eos":true`)))
	if *got.Choices[0].Message.Content != *whole.Choices[0].Message.Content {
		t.Errorf("disaggregated answer differs from the whole one:\n%q\n%q", *got.Choices[0].Message.Content, *whole.Choices[0].Message.Content)
	}
	if got.Usage.PromptTokens != whole.Usage.PromptTokens || got.Usage.CompletionTokens != 20 {
		t.Errorf("usage %+v, want %d prompt and 20 completion tokens", got.Usage, whole.Usage.PromptTokens)
	}
	// The decoder moved (prompt − 1) tokens of KV over its link, and spent
	// that transfer, not a prefill, before its first token.
	model, _ := accelerators.LookupModel(DefaultModel)
	acc, _ := accelerators.LookupAccelerator(DefaultAccelerator)
	pulled := got.Usage.PromptTokens - 1
	wantBytes := float64(pulled) * model.KVBytesPerToken()
	if sum := histogramSum(t, de, "vllm:nixl_bytes_transferred"); sum != wantBytes {
		t.Errorf("bytes transferred %v, want %v", sum, wantBytes)
	}
	xfer := accelerators.HostTransferTime(acc, wantBytes)
	prefillTime := accelerators.PrefillTime(acc, model, got.Usage.PromptTokens)
	if xfer*5 > prefillTime {
		t.Fatalf("test premise: transfer %v should be far below the prefill %v", xfer, prefillTime)
	}
	// Both engines ran the same decode steps; the whole one prefilled
	// where the decoder pulled.
	dsim, bsim := de.Stats().SimTime, be.Stats().SimTime
	if dsim < xfer || bsim-dsim < prefillTime-xfer-prefillTime/10 {
		t.Errorf("simulated time: decoder %v, whole engine %v: want the decoder shorter by the prefill (%v) less the transfer (%v)", dsim, bsim, prefillTime, xfer)
	}
	// The lease was released to the decoder: nothing is held at the
	// prefiller, and the same params cannot be pulled twice.
	waitFor(t, func() bool { return pe.Stats().UsedBlocks == 0 })
	resp := post(t, dsrv.URL+"/v1/chat/completions", chatBody(content, decodeLeg(t, p, "")))
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("second pull: status %d, want 400", resp.StatusCode)
	}
	eb := decode[errorBody](t, resp)
	if !strings.Contains(eb.Error.Message, "KV transfer") || !strings.Contains(eb.Error.Message, "unknown remote_request_id") {
		t.Errorf("second pull refused with %q", eb.Error.Message)
	}
}

func TestDecodeStreamsAfterPull(t *testing.T) {
	_, psrv := newTestEngine(t, Config{Role: RolePrefill})
	_, dsrv := newTestEngine(t, Config{Role: RoleDecode})
	content := prompt(3, 8000)
	p := prefill(t, psrv.URL, content)
	resp := post(t, dsrv.URL+"/v1/chat/completions", chatBody(content, decodeLeg(t, p, `,"stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"ignore_eos":true`)))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	events, err := readSSE(resp)
	if err != nil {
		t.Fatal(err)
	}
	var c chunk
	if err := json.Unmarshal([]byte(events[len(events)-1].data), &c); err != nil || c.Usage == nil || c.Usage.CompletionTokens != 5 {
		t.Fatalf("last event %q (%v): want the usage of 5 tokens", events[len(events)-1].data, err)
	}
}

func TestExpiredLeaseRefused(t *testing.T) {
	pe, psrv := newTestEngine(t, Config{Role: RolePrefill, KVLease: time.Millisecond})
	_, dsrv := newTestEngine(t, Config{Role: RoleDecode})
	content := prompt(4, 4000)
	p := prefill(t, psrv.URL, content)
	// The engine frees an expired lease by itself, without a pull. (The
	// stats alone may show no blocks used before the prefill's step has
	// been counted, while the lease is still live.)
	waitFor(t, func() bool {
		pe.sched.leases.mu.Lock()
		defer pe.sched.leases.mu.Unlock()
		return len(pe.sched.leases.m) == 0 && pe.Stats().UsedBlocks == 0
	})
	resp := post(t, dsrv.URL+"/v1/chat/completions", chatBody(content, decodeLeg(t, p, "")))
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if eb := decode[errorBody](t, resp); !strings.Contains(eb.Error.Message, "unknown remote_request_id") && !strings.Contains(eb.Error.Message, "expired") {
		t.Errorf("refused with %q", eb.Error.Message)
	}
}

func TestPullRefusals(t *testing.T) {
	pe, psrv := newTestEngine(t, Config{Role: RolePrefill, KVLease: time.Hour})
	_, dsrv := newTestEngine(t, Config{Role: RoleDecode})
	p := prefill(t, psrv.URL, prompt(5, 4000))

	other := *p
	wrongEngine := "another-engine"
	other.RemoteEngineID = &wrongEngine
	resp := post(t, dsrv.URL+"/v1/chat/completions", chatBody(prompt(5, 4000), decodeLeg(t, &other, "")))
	if eb := decode[errorBody](t, resp); resp.StatusCode != 400 || !strings.Contains(eb.Error.Message, "is not this engine") {
		t.Errorf("wrong engine: %d %q", resp.StatusCode, eb.Error.Message)
	}
	resp = post(t, dsrv.URL+"/v1/chat/completions", chatBody(prompt(6, 4000), decodeLeg(t, p, "")))
	if eb := decode[errorBody](t, resp); resp.StatusCode != 400 || !strings.Contains(eb.Error.Message, "another prompt") {
		t.Errorf("wrong prompt: %d %q", resp.StatusCode, eb.Error.Message)
	}
	// A refused pull still frees the blocks: a decoder had them named.
	waitFor(t, func() bool { return pe.Stats().UsedBlocks == 0 })

	cases := []struct {
		name string
		cfg  Config
		body string
		want string
	}{
		{"decode engine asked to prefill", Config{Role: RoleDecode}, prefillLeg, "role decode"},
		{"prefill engine asked to decode", Config{Role: RolePrefill}, `,"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"x","remote_request_id":"y","remote_host":"127.0.0.1","remote_port":1}`, "role prefill"},
		{"streamed prefill", Config{}, `,"stream":true,"kv_transfer_params":{"do_remote_decode":true}`, "stream must be false"},
		{"params missing", Config{}, `,"kv_transfer_params":{"do_remote_prefill":true}`, "needs remote_engine_id"},
		{"unreachable prefiller", Config{}, `,"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"x","remote_request_id":"y","remote_host":"127.0.0.1","remote_port":1}`, "could not reach"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, srv := newTestEngine(t, c.cfg)
			resp := post(t, srv.URL+"/v1/chat/completions", chatBody("hello", c.body))
			eb := decode[errorBody](t, resp)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(eb.Error.Message, c.want) {
				t.Errorf("%d %q, want 400 with %q", resp.StatusCode, eb.Error.Message, c.want)
			}
		})
	}
}

// TestLongPrefillRaisesInterTokenLatency: on an engine that prefills and
// decodes, a long prompt's chunks share steps with running decodes, so
// their tokens wait for the prefill; that is the interference P/D removes.
func TestLongPrefillRaisesInterTokenLatency(t *testing.T) {
	s := newTestScheduler(t, 100000, 256, 8192)
	dec := testSeq(1, prompt(1, 400), 50)
	s.enqueue(dec)
	for dec.generated < 3 {
		s.apply(s.schedule())
	}
	quiet := s.schedule()
	s.apply(quiet)
	s.enqueue(testSeq(2, prompt(2, 4*16000), 2)) // 16k tokens: two 8k chunks
	mixed := s.schedule()
	if len(s.batch) != 2 || s.batch[0].q != dec || s.batch[0].n != 1 || s.batch[1].n != 8192-1 {
		t.Fatalf("batch %+v: want the decode's token and a prefill chunk filling the budget", s.batch)
	}
	s.apply(mixed)
	if mixed < 10*quiet {
		t.Errorf("inter-token latency %v with a prefill chunk in the step, %v without: want at least 10x", mixed, quiet)
	}
	checkInvariants(t, s)
}

func histogramSum(t *testing.T, e *Engine, name string) float64 {
	t.Helper()
	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// FuzzPullBody: whatever a decoder sends the side channel, the prefiller
// answers 200 only for a lease it holds, else 400 or 404, never a panic.
func FuzzPullBody(f *testing.F) {
	f.Add([]byte(`{"engine_id":"x","request_id":"y","prompt_hash":1}`))
	f.Add([]byte(`{"engine_id":`))
	f.Add([]byte(`[]`))
	e, err := New(Config{Role: RolePrefill})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		e.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, PullPath, bytes.NewReader(body)))
		if rec.Code != http.StatusBadRequest && rec.Code != http.StatusNotFound {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}

// FuzzKVTransferParams: a chat body carrying any kv_transfer_params is
// answered or refused with a 4xx, never a 5xx or a panic.
func FuzzKVTransferParams(f *testing.F) {
	f.Add([]byte(`{"do_remote_decode":true}`))
	f.Add([]byte(`{"do_remote_prefill":true,"remote_engine_id":"a","remote_request_id":"b","remote_host":"127.0.0.1","remote_port":1}`))
	f.Add([]byte(`{"do_remote_prefill":true,"remote_port":"x"}`))
	e, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	f.Fuzz(func(t *testing.T, params []byte) {
		body := `{"model":"llama-3.1-8b","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"kv_transfer_params":` + string(params) + `}`
		rec := httptest.NewRecorder()
		e.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("status %d for %s: %s", rec.Code, params, rec.Body)
		}
	})
}
