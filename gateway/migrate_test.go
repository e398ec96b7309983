package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/affinity"
	"github.com/turnpike-gateway/turnpike/dispatch"
	"github.com/turnpike-gateway/turnpike/pools"
	tpresponses "github.com/turnpike-gateway/turnpike/responses"
	"github.com/turnpike-gateway/turnpike/state"
)

// dyingFleet is a gateway in front of two identical simulated engines;
// while armed, the next chat completion either engine serves is cut after
// dropAfter streamed chunks, as a replica that dies mid-answer.
type dyingFleet struct {
	s      *Server
	front  *httptest.Server
	client openai.Client
	armed  atomic.Bool
	cut    atomic.Int64
}

func newDyingFleet(t *testing.T, dropAfter int) *dyingFleet {
	t.Helper()
	return newDyingFleetAt(t, dropAfter, 0)
}

// newDyingFleetAt is newDyingFleet with engines at timeScale.
func newDyingFleetAt(t *testing.T, dropAfter int, timeScale float64) *dyingFleet {
	t.Helper()
	f := &dyingFleet{}
	log := slog.New(slog.DiscardHandler)
	var eps []pools.EndpointConfig
	for range 2 {
		eng, err := sim.New(sim.Config{ServedModelName: testModel, TimeScale: timeScale})
		if err != nil {
			t.Fatal(err)
		}
		h := eng.Handler()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/chat/completions" && f.armed.CompareAndSwap(true, false) {
				f.cut.Add(1)
				r.Header.Set(sim.FaultHeader, fmt.Sprintf("drop-after=%d", dropAfter))
			}
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(func() { srv.Close(); eng.Close() })
		eps = append(eps, pools.EndpointConfig{URL: srv.URL})
	}
	reg, err := pools.NewRegistry([]pools.PoolConfig{{Name: "p", ServedModels: []string{testModel}, Endpoints: eps}}, pools.Options{}, log)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Options{Registry: reg, Policy: &affinity.RoundRobin{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	db := state.NewMemory()
	svc := tpresponses.New(tpresponses.NewStore(db.Namespace("rs/"), tpresponses.StoreOptions{}), d, tpresponses.Config{CollectInterval: -1, Logger: log})
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg, Dispatch: d, Logger: log, Responses: svc})
	if err != nil {
		t.Fatal(err)
	}
	f.s = s
	f.front = httptest.NewServer(s.Handler())
	t.Cleanup(func() { f.front.Close(); svc.Close(context.Background()); db.Close() })
	f.client = openai.NewClient(option.WithBaseURL(f.front.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	return f
}

// chatStreamText streams a chat completion and returns its text, whether
// it ended with [DONE], and whether an error event came.
func chatStreamText(t *testing.T, url, body string) (text string, done, failed bool) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct{} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %q is not JSON: %v", data, err)
		}
		failed = failed || c.Error != nil
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String(), done, failed
}

// TestChatStreamSurvivesADyingReplica: the client sees one unbroken
// stream, the same text as without the failure.
func TestChatStreamSurvivesADyingReplica(t *testing.T) {
	f := newDyingFleet(t, 6)
	body := `{"model":"test-model","stream":true,"max_tokens":30,"ignore_eos":true,"messages":[{"role":"user","content":"tell me about caches"}]}`
	want, done, failed := chatStreamText(t, f.front.URL, body)
	if !done || failed || len(want) != 30*sim.TokenBytes {
		t.Fatalf("baseline: %q done %v failed %v", want, done, failed)
	}
	f.armed.Store(true)
	got, done, failed := chatStreamText(t, f.front.URL, body)
	if f.cut.Load() != 1 {
		t.Fatal("no replica died")
	}
	if !done || failed || got != want {
		t.Fatalf("across the failure: %q done %v failed %v; want %q", got, done, failed, want)
	}
}

// TestResponsesSurviveADyingReplica: a Responses turn whose replica dies
// mid-answer completes, streamed or not, with the text it would have had
// and usage that counts both legs.
func TestResponsesSurviveADyingReplica(t *testing.T) {
	f := newDyingFleet(t, 5)
	params := responses.ResponseNewParams{
		Model:           testModel,
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("tell me about caches")},
		MaxOutputTokens: openai.Int(24),
	}
	base, err := f.client.Responses.New(t.Context(), params)
	if err != nil || base.Status != "completed" {
		t.Fatalf("baseline: %v %+v", err, base)
	}

	f.armed.Store(true)
	got, err := f.client.Responses.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if f.cut.Load() != 1 || got.Status != "completed" || got.OutputText() != base.OutputText() {
		t.Fatalf("non-streamed across the failure (%d cut): status %s, text %q; want %q", f.cut.Load(), got.Status, got.OutputText(), base.OutputText())
	}
	if got.Usage.OutputTokens != base.Usage.OutputTokens || got.Usage.InputTokens == 0 {
		t.Errorf("usage %+v, want %d output tokens over both legs", got.Usage, base.Usage.OutputTokens)
	}

	f.armed.Store(true)
	stream := f.client.Responses.NewStreaming(t.Context(), params)
	var deltas strings.Builder
	var final responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed", "response.failed":
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if f.cut.Load() != 2 || final.Status != "completed" || deltas.String() != base.OutputText() || final.OutputText() != base.OutputText() {
		t.Fatalf("streamed across the failure: status %s, deltas %q, text %q; want %q", final.Status, deltas.String(), final.OutputText(), base.OutputText())
	}
}

// TestResponsesStreamAtTheShutdownDeadline: a Responses stream still
// running when the shutdown deadline passes ends with response.failed
// saying the gateway is shutting down.
func TestResponsesStreamAtTheShutdownDeadline(t *testing.T) {
	f := newDyingFleetAt(t, -1, 1) // real time: a long answer outlasts the deadline
	f.s.opts.ShutdownTimeout = time.Millisecond
	f.s.opts.Addr = "127.0.0.1:0"
	if err := f.s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	client := openai.NewClient(option.WithBaseURL("http://"+f.s.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	stream := client.Responses.NewStreaming(t.Context(), responses.ResponseNewParams{
		Model:           testModel,
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("tell me about caches")},
		MaxOutputTokens: openai.Int(4000),
	})
	var final responses.Response
	shut := false
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "response.output_text.delta" && !shut {
			shut = true
			go f.s.Close(context.Background())
		}
		if ev.Type == "response.failed" || ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if final.Status != "failed" || !strings.Contains(final.Error.Message, "shutting down") {
		t.Fatalf("at the shutdown deadline: status %q, error %+v (stream err %v)", final.Status, final.Error, stream.Err())
	}
}
