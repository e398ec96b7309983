package embedded

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/turnpike-gateway/turnpike/accelerators/sim"
	"github.com/turnpike-gateway/turnpike/pools"
)

// TestEmbeddedLending: a lendable pool takes nothing until it is lent;
// lent, it takes background work and never a foreground turn; reclaimed
// with a deadline of zero, the background stream running on it moves to
// the gateway's own pool and ends whole.
func TestEmbeddedLending(t *testing.T) {
	own := sim.Config{Accelerator: testAccelerator, Model: testModel, ServedModelName: testServedModel}
	lent := own
	lent.TimeScale = 1 // real time: a long answer is still streaming when the pool is reclaimed
	ls, err := startLendingStack(t.Context(), own, lent, 1, 1, "cache-aware", nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close(t.Context()) })
	base := "http://" + ls.Addr()
	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	background := option.WithHeader("x-turnpike-priority", "background")
	lentEngine := ls.fleet.Fleet(1).Engines[0]
	ownID := strings.TrimPrefix(ls.fleet.Fleet(0).URLs[0], "http://")
	admin := func(method, path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+"/admin/v1"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+ls.adminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		var out map[string]any
		json.Unmarshal(b, &out)
		return out
	}
	chat := func(max int64, opts ...option.RequestOption) (*openai.ChatCompletion, error) {
		return client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model:     testServedModel,
			MaxTokens: openai.Int(max),
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("How tall is the lighthouse?")},
		}, opts...)
	}

	// Not lent: everything runs on the gateway's own pool.
	for _, opts := range [][]option.RequestOption{nil, {background}} {
		if _, err := chat(4, opts...); err != nil {
			t.Fatal(err)
		}
	}
	if s := lentEngine.Stats().Steps; s != 0 {
		t.Fatalf("the lendable engine ran %d steps before it was lent", s)
	}

	// Lent, with the own pool drained: background work runs on the lent
	// pool, foreground turns find no endpoint.
	if st := admin(http.MethodPost, "/pools/trainer/lend", `{"duration":"10m","reclaimDeadline":"30s"}`)["lending"].(map[string]any)["state"]; st != "lent" {
		t.Fatalf("lending state %v after lend", st)
	}
	admin(http.MethodPost, "/endpoints/"+ownID+"/drain", "")
	_, err = chat(4)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode < 500 {
		t.Fatalf("a foreground turn with only the lent pool available: %v, want a 5xx naming no endpoint", err)
	}
	if _, err := chat(4, background); err != nil {
		t.Fatalf("a background turn on the lent pool: %v", err)
	}
	r, err := client.Responses.New(t.Context(), responses.ResponseNewParams{
		Model:           testServedModel,
		Background:      openai.Bool(true),
		MaxOutputTokens: openai.Int(8),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Summarise the log.")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for r.Status != responses.ResponseStatusCompleted {
		if r.Status == responses.ResponseStatusFailed || r.Status == responses.ResponseStatusCancelled {
			t.Fatalf("background response on the lent pool: %s %+v", r.Status, r.Error)
		}
		time.Sleep(10 * time.Millisecond)
		if r, err = client.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{}); err != nil {
			t.Fatal(err)
		}
	}
	if lentEngine.Stats().Steps == 0 {
		t.Fatal("background work did not run on the lent pool")
	}

	// A long background stream on the lent pool; the own pool back; the
	// reclaim cuts the stream at once, and it continues on the own pool.
	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:     testServedModel,
		MaxTokens: openai.Int(400),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Write the whole report.")},
	}, background, option.WithJSONSet("ignore_eos", true))
	defer stream.Close()
	var text strings.Builder
	for text.Len() == 0 && stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	admin(http.MethodPost, "/endpoints/"+ownID+"/undrain", "")
	pool := admin(http.MethodPost, "/pools/trainer/reclaim", `{"deadline":"0s"}`)
	finished := ""
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
			if c.Choices[0].FinishReason != "" {
				finished = c.Choices[0].FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil || finished == "" {
		t.Fatalf("the stream cut by the reclaim: err %v, finish %q, %d bytes; want it whole from the own pool", err, finished, text.Len())
	}
	lending := admin(http.MethodGet, "/pools/trainer", "")["lending"].(map[string]any)
	if lending["state"] != "idle" || lending["cancelledByReclaim"] != 1.0 || lending["inFlight"] != 0.0 {
		t.Errorf("after the reclaim: %v (reclaim answered %v), want idle with one request cut", lending, pool["lending"])
	}
	if _, err := chat(4); err != nil {
		t.Errorf("a foreground turn after the reclaim: %v", err)
	}
}

// TestLendingOnSchedule: a lendable pool whose schedule has a window open
// now is lent by the gateway on its own, until the window's end, and a
// background turn runs there.
func TestLendingOnSchedule(t *testing.T) {
	now := time.Now().UTC()
	clock := func(t time.Time) string { return t.Format("15:04") }
	// A two-hour window around now (crossing midnight when it must).
	sched := &pools.LendSchedule{ReclaimDeadline: "5s", Windows: []pools.LendWindow{
		{From: clock(now.Add(-time.Hour)), To: clock(now.Add(time.Hour))},
	}}
	cfg := sim.Config{Accelerator: testAccelerator, Model: testModel, ServedModelName: testServedModel}
	ls, err := startLendingStack(t.Context(), cfg, cfg, 1, 1, "cache-aware", sched, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.Close(t.Context()) })
	trainer := ls.Registry().Pools[1]
	deadline := time.Now().Add(30 * time.Second)
	for !trainer.Lent() {
		if time.Now().After(deadline) {
			t.Fatal("the pool was not lent in its scheduled window")
		}
		time.Sleep(20 * time.Millisecond)
	}
	l := trainer.Lease()
	if want := now.Add(time.Hour).Truncate(time.Minute); !l.Until.Equal(want) || l.Grace != 5*time.Second {
		t.Fatalf("lease until %v grace %v; want until %v grace 5s", l.Until, l.Grace, want)
	}
	// With the gateway's own pool drained, a background turn can only
	// run on the lent pool.
	ls.Registry().Pools[0].Endpoints()[0].SetDraining(true)
	client := openai.NewClient(option.WithBaseURL("http://"+ls.Addr()+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	if _, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:     testServedModel,
		MaxTokens: openai.Int(4),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Summarise the logs.")},
	}, option.WithHeader("x-turnpike-priority", "background")); err != nil {
		t.Fatalf("a background turn on the pool lent on its schedule: %v", err)
	}
	if ls.fleet.Fleet(1).Engines[0].Stats().Steps == 0 {
		t.Error("the background turn did not run on the pool lent on its schedule")
	}
}
